use super::*;
use crate::import::text;

fn reports(log: &str) -> Vec<Report> {
    let mut j = Joiner::default();
    let mut out = Vec::new();
    for (i, raw) in log.lines().enumerate() {
        let (t, tag) = text::clean(raw);
        let line = Line {
            number: i + 1,
            raw: raw.into(),
            text: t,
            tag_rank: tag,
        };
        j.push("t", &line, &mut |r| out.push(r));
    }
    j.flush("t", &mut |r| out.push(r));
    out
}

fn progress(log: &str) -> Vec<WorkProgress> {
    reports(log)
        .into_iter()
        .filter_map(|r| match r {
            Report::Progress(p) => Some(p),
            Report::Event(_) => None,
        })
        .collect()
}

type Queue = (
    usize,
    Option<String>,
    &'static str,
    Option<i64>,
    Option<i64>,
    Option<i64>,
);

fn queue(p: &WorkProgress) -> Queue {
    (
        p.rank,
        p.process_group.clone(),
        p.kind,
        p.failed_seq,
        p.last_enqueued,
        p.last_completed,
    )
}

#[test]
fn every_queue_wording_gives_rank_group_and_sequence_numbers() {
    // ProcessGroupNCCL.cpp's createLogPrefix (2.2: "[PG 0 Rank 3]", 2.3-2.4: "[PG 0 (default_pg)
    // Rank 3]", 2.5+: "[PG ID 0 PG GUID 0(default_pg) Rank 3]") before watchdogHandler's lines.
    let cases: [(&str, Queue); 6] = [
        (
            "[default3]:[rank3]:[E ProcessGroupNCCL.cpp:1537] [PG 0 (default_pg) Rank 3] Timeout at NCCL work: 12345, last enqueued NCCL work: 12345, last completed NCCL work: 12344.",
            (3, Some("0".into()), "timeout", Some(12345), Some(12345), Some(12344)),
        ),
        (
            "[rank1]:[E1103 07:34:57.460801783 ProcessGroupNCCL.cpp:1834] [PG ID 0 PG GUID 0(default_pg) Rank 1] Timeout at NCCL work: 1, last enqueued NCCL work: 1, last completed NCCL work: -1.",
            (1, Some("0".into()), "timeout", Some(1), Some(1), Some(-1)),
        ),
        (
            "[rank118]:[E603 17:48:01.005538748 ProcessGroupNCCL.cpp:2268] [PG ID 0 PG GUID 0(default_pg) Rank 118]  failure detected by watchdog at work sequence id: 2398459 PG status: last enqueued work: 2398578, last completed work: 2398458",
            (118, Some("0".into()), "failure", Some(2398459), Some(2398578), Some(2398458)),
        ),
        (
            "[rank4]:[E1206 18:44:12.755468433 ProcessGroupNCCL.cpp:1664] [PG 1 Rank 4] Exception (either an error or timeout) detected by watchdog at work: 7753, last enqueued NCCL work: 7755, last completed NCCL work: 7752.",
            (4, Some("1".into()), "timeout or error", Some(7753), Some(7755), Some(7752)),
        ),
        (
            "[rank1]:[E709 17:05:38.4 ProcessGroupNCCL.cpp:1746] [PG ID 0 PG GUID 0(default_pg) Rank 1] Received a dump signal due to a collective timeout from rank 0 and we will try our best to dump the debug info. Last enqueued NCCL work: 1155873, last completed NCCL work: 1155873.This is most likely caused by incorrect usages of collectives",
            (1, Some("0".into()), "state", None, Some(1155873), Some(1155873)),
        ),
        // Some 2.3 builds printed an uninitialised counter: it is not kept.
        (
            "[rank2]:[E ProcessGroupNCCL.cpp:1537] [PG 0 Rank 2] Timeout at NCCL work: 1, last enqueued NCCL work: 1, last completed NCCL work: 76280750235782912.",
            (2, Some("0".into()), "timeout", Some(1), Some(1), None),
        ),
    ];
    for (line, want) in cases {
        let got = progress(line);
        assert_eq!(got.len(), 1, "{line}");
        assert_eq!(queue(&got[0]), want, "{line}");
    }
}

#[test]
fn launcher_prefixes_do_not_hide_the_message() {
    for line in [
        "0: [rank3]:[E ProcessGroupNCCL.cpp:1537] [PG 0 (default_pg) Rank 3] Timeout at NCCL work: 9, last enqueued NCCL work: 9, last completed NCCL work: 8.",
        "[1,3]<stderr>:[E ProcessGroupNCCL.cpp:1537] [PG 0 (default_pg) Rank 3] Timeout at NCCL work: 9, last enqueued NCCL work: 9, last completed NCCL work: 8.",
        "(WorkerDict pid=3490362) [rank3]:[E ProcessGroupNCCL.cpp:1537] [PG 0 (default_pg) Rank 3] Timeout at NCCL work: 9, last enqueued NCCL work: 9, last completed NCCL work: 8.",
        "job-7.node12 [stderr] [default3]:[rank3]:[E ProcessGroupNCCL.cpp:1537] [PG 0 (default_pg) Rank 3] Timeout at NCCL work: 9, last enqueued NCCL work: 9, last completed NCCL work: 8.",
    ] {
        let got = progress(line);
        assert_eq!(got.len(), 1, "{line}");
        assert_eq!(
            (got[0].rank, got[0].failed_seq, got[0].last_completed),
            (3, Some(9), Some(8)),
            "{line}"
        );
    }
}

#[test]
fn lines_a_terminal_wrapped_are_joined_wherever_the_wrap_fell() {
    // mila-iqia/milabench#269, as posted: the wrap left "NCCL work: 2082, ..." without the prefix.
    let milabench = "dinov2-giant-nodes.cn-d003.nolog [stderr] [rank3]:[E909 09:55:46.996672294 ProcessGroupNCCL.cpp:1709] [PG 0 (default_pg) Rank 3] Timeout at NCCL work: 2070, last enqueued \n\
NCCL work: 2082, last completed NCCL work: 2069.\n\
dinov2-giant-nodes.cn-d003.nolog [stderr] [rank3]:[E909 09:55:46.996701349 ProcessGroupNCCL.cpp:621] [Rank 3] Some NCCL operations have failed or timed out.\n";
    let got = progress(milabench);
    assert_eq!(got.len(), 1);
    assert_eq!(
        queue(&got[0]),
        (
            3,
            Some("0".into()),
            "timeout",
            Some(2070),
            Some(2082),
            Some(2069)
        )
    );
    assert_eq!(got[0].evidence.line, 1);
    // A wrap inside a word and one inside the last number of the 2.6+ line, which has no period.
    let cut = "[rank5]:[E810 03:04:10.8 ProcessGroupNCCL.cpp:2241] [PG ID 0 PG GUID 0(default_pg) Rank 5]  failure detected by watch\n\
dog at work sequence id: 78 PG status: last enqueued work: 79, last completed work: 7\n\
7\n\
[rank5]:[E810 03:04:10.9 ProcessGroupNCCL.cpp:667] Stack trace of the failed collective not found\n";
    let got = progress(cut);
    assert_eq!(
        queue(&got[0]),
        (5, Some("0".into()), "failure", Some(78), Some(79), Some(77))
    );
    // A watchdog event wrapped twice, with the prefix only on its first piece.
    let event = "[rank1]:[E626 06:24:44.9 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=808, OpType=ALLRE\n\
DUCE, NumelIn=9801523, NumelOut=9801523, Timeout(ms)=600000) ran for 600031 milliseco\n\
nds before timing out.\n";
    match reports(event).as_slice() {
        [Report::Event(e)] => {
            assert_eq!((e.rank, e.op.as_str(), e.seq), (1, "ALLREDUCE", Some(808)));
            assert_eq!(e.timeout_ms, Some(600_000));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_next_prefixed_line_is_never_taken_as_a_piece() {
    let log = "[rank0]:[E ProcessGroupNCCL.cpp:2271] [PG ID 0 PG GUID 0(default_pg) Rank 0]  failure detected by watchdog at work sequence id: 20585 PG status: last enqueued work: 20589, last completed work: 20584\n\
[rank1]:[E ProcessGroupNCCL.cpp:2271] [PG ID 0 PG GUID 0(default_pg) Rank 1]  failure detected by watchdog at work sequence id: 20585 PG status: last enqueued work: 20585, last completed work: 20584\n\
2024-07-09 17:05:38,162 - trainer - ERROR - step 20585 failed\n\
Traceback (most recent call last):\n";
    let got = progress(log);
    let seen: Vec<Queue> = got.iter().map(queue).collect();
    assert_eq!(
        seen,
        vec![
            (
                0,
                Some("0".into()),
                "failure",
                Some(20585),
                Some(20589),
                Some(20584)
            ),
            (
                1,
                Some("0".into()),
                "failure",
                Some(20585),
                Some(20585),
                Some(20584)
            ),
        ]
    );
}

#[test]
fn blocking_wait_and_old_watchdog_lines_are_events_and_other_lines_nothing() {
    let log = "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800325 milliseconds before timing out.\n\
[rank7]:[E1002 18:16:40.663182067 ProcessGroupNCCL.cpp:756] [Rank 7] Work WorkNCCL(SeqNum=2521, OpType=ALLREDUCE, NumelIn=160672064, NumelOut=160672064, Timeout(ms)=600000) timed out in blocking wait.\n\
[rank0]:[W ProcessGroupNCCL.cpp:4115] [PG ID 0 PG GUID 0 Rank 0]  using GPU 0 to perform barrier as devices used by this process are currently unknown.\n";
    let got = reports(log);
    assert_eq!(got.len(), 2, "{got:?}");
    match (&got[0], &got[1]) {
        (Report::Event(a), Report::Event(b)) => {
            assert_eq!(
                (a.rank, a.timeout_ms, a.process_group.clone()),
                (3, Some(1_800_000), None)
            );
            assert_eq!((b.rank, b.seq), (7, Some(2521)));
        }
        other => panic!("{other:?}"),
    }
}
