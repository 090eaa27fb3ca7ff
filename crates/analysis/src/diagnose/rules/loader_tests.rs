use super::*;
use crate::import::pastes::Pastes;
use crate::import::text::{clean, Line};

fn pasted(text: &str) -> Pastes {
    let mut p = Pastes::default();
    for (i, raw) in text.lines().enumerate() {
        let (t, tag) = clean(raw);
        p.feed(
            "paste",
            &Line {
                number: i + 1,
                raw: raw.into(),
                text: t,
                tag_rank: tag,
            },
        );
    }
    p.finish("paste");
    p
}

fn inputs(texts: &[&str]) -> Inputs {
    Inputs {
        pastes: texts.iter().map(|t| pasted(t)).collect(),
        ..Default::default()
    }
}

fn smi_row(gpu: u32, used: u32, total: u32, util: u32) -> String {
    format!(
        "|   {gpu}  NVIDIA A10                     On  | 00000000:0{gpu}:00.0 Off |                    0 |\n\
         |  0%   38C    P0              60W / 150W |  {used}MiB / {total}MiB |    {util}%      Default |\n"
    )
}

fn free(total_gi: f64, used_gi: f64, available_gi: f64, swap: (f64, f64)) -> String {
    format!(
        "               total        used        free      shared  buff/cache   available\n\
         Mem:      {total_gi}Gi  {used_gi}Gi  0.3Gi  0.1Gi  1.0Gi  {available_gi}Gi\n\
         Swap:     {}Gi  {}Gi  0Gi\n",
        swap.0, swap.1
    )
}

const WARNING_40_28: &str = "dataloader.py:560: UserWarning: This DataLoader will create 40 worker processes in total. Our suggested max number of worker in current system is 28, which is smaller than what this DataLoader is going to create.";

#[test]
fn an_idle_gpu_beside_an_oversubscribed_loader_is_starved() {
    let inp = inputs(&[&format!("{}\n{WARNING_40_28}\n", smi_row(0, 700, 23028, 3))]);
    let over = oversubscribed(&inp);
    assert_eq!(over.len(), 1);
    assert!(
        over[0].title.contains("40 worker processes per rank"),
        "{}",
        over[0].title
    );
    assert!(
        over[0].title.contains("at most 28 per rank fit"),
        "{}",
        over[0].title
    );
    assert!(over[0].evidence[0].text.contains("will create 40 worker"));
    let starved = starved(&inp);
    assert_eq!(starved.len(), 1);
    assert_eq!(starved[0].severity, None);
    assert!(starved[0]
        .title
        .starts_with("GPU utilisation 3% with memory 3% used"));
    assert!(starved[0].evidence[0].text.contains("700MiB / 23028MiB"));
}

#[test]
fn busy_gpus_are_never_starved_whatever_the_host_shows() {
    // seeds/001: three GPUs at 100% with half their memory, host RAM 94% and swap in use.
    let gpus: String = [(0, 9587), (1, 11761), (2, 9329)]
        .iter()
        .map(|(g, used)| smi_row(*g, *used, 20480, 100))
        .collect();
    let inp = inputs(&[&gpus, &free(31.0, 29.0, 1.8, (4.0, 2.1))]);
    assert!(starved(&inp).is_empty());
    let pressure = memory_pressure(&inp);
    assert_eq!(pressure.len(), 1);
    assert!(pressure[0]
        .title
        .starts_with("host RAM 94% in use, swap 52% used"));
    assert!(pressure[0]
        .evidence
        .iter()
        .any(|e| e.text.starts_with("Swap:")));
    // One GPU busy among idle ones is a placement question, not a loader's.
    let mixed = format!(
        "{}{}",
        smi_row(0, 9000, 20480, 100),
        smi_row(1, 9000, 20480, 2)
    );
    assert!(starved(&inputs(&[&mixed, WARNING_40_28])).is_empty());
}

#[test]
fn idle_and_full_gpus_are_not_starved() {
    // No process on it: an idle GPU.
    assert!(starved(&inputs(&[&smi_row(0, 5, 23028, 0), WARNING_40_28])).is_empty());
    // Memory nearly full and low utilisation: offload or the allocator, not the loader.
    assert!(starved(&inputs(&[&smi_row(0, 7719, 8192, 6), WARNING_40_28])).is_empty());
}

#[test]
fn low_utilisation_alone_is_info_and_a_placement_finding_explains_it() {
    let inp = inputs(&[&smi_row(0, 4000, 23028, 12)]);
    let hit = starved(&inp);
    assert_eq!(hit[0].severity, Some(Severity::Info));
    assert!(hit[0].title.contains("nothing else in the inputs"));
    let mut explained = inputs(&[&smi_row(0, 4000, 23028, 12)]);
    explained.smis.push((
        "smi".into(),
        crate::import::smi::parse_str(
            "| Processes:  |\n|    0   N/A  N/A     21002      C   python     812MiB |\n|    1   N/A  N/A     21002      C   python   21510MiB |\n",
        ),
    ));
    assert!(starved(&explained).is_empty());
    // num_workers=0 names the loader.
    let serial = inputs(&[
        &smi_row(0, 4000, 23028, 12),
        "DataLoader(ds, num_workers=0)",
    ]);
    let hit = starved(&serial);
    assert_eq!(hit[0].severity, None);
    assert!(hit[0].title.contains("num_workers 0"), "{}", hit[0].title);
}

#[test]
fn workers_times_local_ranks_against_the_cpus() {
    let over = inputs(&["torchrun --nproc_per_node=4 train.py --num-workers 12\n$ nproc\n32\n"]);
    let hit = oversubscribed(&over);
    assert_eq!(hit.len(), 1);
    assert!(
        hit[0].title.contains("num_workers 12 × 4 local ranks = 48 worker processes on 32 CPUs; at most 8 per rank fit"),
        "{}",
        hit[0].title
    );
    assert_eq!(hit[0].evidence.len(), 3);
    let fits = inputs(&["torchrun --nproc_per_node=4 train.py --num-workers 8\n$ nproc\n32\n"]);
    assert!(oversubscribed(&fits).is_empty());
    // The warning counts one loader; ranks on the node multiply it.
    let ranks = inputs(&[
        "torchrun --nproc-per-node 4 train.py\nUserWarning: This DataLoader will create 8 worker processes in total. Our suggested max number of worker in current system is 16, which is smaller",
    ]);
    assert!(oversubscribed(&ranks)[0]
        .title
        .contains("at most 4 per rank fit"));
}

#[test]
fn memory_pressure_needs_full_ram_or_swapping_beside_fullish_ram() {
    let hit = |total, used, available, swap| {
        !memory_pressure(&inputs(&[&free(total, used, available, swap)])).is_empty()
    };
    assert!(hit(32.0, 29.0, 2.0, (4.0, 0.0)));
    assert!(!hit(32.0, 25.0, 6.4, (4.0, 0.0)));
    assert!(hit(32.0, 25.0, 6.4, (4.0, 1.0)));
    // Swap used long ago with RAM to spare costs nothing now.
    assert!(!hit(32.0, 10.0, 20.0, (4.0, 2.0)));
}
