//! Gates a silent fallback cannot pass: `--require transport=NET/IB`, `--require gdr`,
//! `--require nvls`, `--forbid socket`. Each is judged on what NCCL said about the run (the
//! record's `nccl`, from the nccl backend) and on the NCCL_DEBUG lines beside it (nccl-tests'
//! output, `--log`). A gate whose evidence is missing fails, saying what to run: a gate never
//! passes a rule it did not check.

use crate::documents::RuleResult;
use crate::import::nccl_log::LogFacts;
use crate::model::RunRecord;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// A transport or network NCCL must have used: `NET/IB`, `IB`, `P2P`, `NVLS`, `SHM`, ...
    RequireTransport(String),
    RequireGdr,
    RequireNvls,
    /// A transport or network NCCL must not have used: `socket`, `shm`, ...
    Forbid(String),
}

impl Gate {
    /// `--require VALUE`.
    pub fn require(text: &str) -> Result<Gate, String> {
        let t = text.trim();
        match t.to_ascii_lowercase().as_str() {
            "gdr" | "gdrdma" | "gpudirect" => Ok(Gate::RequireGdr),
            "nvls" => Ok(Gate::RequireNvls),
            _ => match t.split_once('=') {
                Some((k, v)) if matches!(k.trim(), "transport" | "network") && !v.trim().is_empty() => {
                    Ok(Gate::RequireTransport(v.trim().to_string()))
                }
                _ => Err(format!(
                    "--require {t}: expected gdr, nvls, or transport=NAME (NET/IB, IB, P2P, SHM, NET/Socket ...)"
                )),
            },
        }
    }

    /// `--forbid VALUE`.
    pub fn forbid(text: &str) -> Result<Gate, String> {
        let t = text.trim().trim_start_matches("transport=").trim();
        if t.is_empty() {
            return Err("--forbid: name a transport or network (socket, shm, ...)".into());
        }
        Ok(Gate::Forbid(t.to_string()))
    }

    fn rule(&self) -> String {
        match self {
            Gate::RequireTransport(t) => format!("require-transport {t}"),
            Gate::RequireGdr => "require-gdr".into(),
            Gate::RequireNvls => "require-nvls".into(),
            Gate::Forbid(t) => format!("forbid {t}"),
        }
    }
}

/// What the run's NCCL showed: each name with the line (or fact) that shows it.
#[derive(Debug, Default)]
struct Seen {
    /// Networks (`Socket`, `IB`, `AWS Libfabric`) and channel transports (`NET/IB`,
    /// `P2P/CUMEM`, `SHM`, `NVLS`), as NCCL names them.
    used: Vec<(String, String)>,
    gdr_on: Vec<String>,
    gdr_off: Vec<String>,
    nvls_on: Vec<String>,
    nvls_off: Vec<String>,
}

fn seen(run: &RunRecord, log: Option<&LogFacts>) -> Seen {
    let mut s = Seen::default();
    if let Some(n) = &run.nccl {
        for net in &n.networks {
            s.used.push((
                net.clone(),
                format!("the run's NCCL log: Using network {net}"),
            ));
        }
        for t in &n.transports {
            s.used
                .push((t.clone(), format!("the run's NCCL log: channels via {t}")));
        }
        if n.gdr {
            s.gdr_on
                .push("the run's NCCL log: GPUDirect RDMA in use".into());
        }
        if let Some(d) = n.dump.as_ref() {
            for r in d
                .rails
                .iter()
                .filter(|r| r.gdr == Some(false) && r.channels > 0)
            {
                s.gdr_off.push(format!(
                    "NCCL's dump: {} -> {} has no GPUDirect RDMA",
                    r.gpu,
                    r.net_name.as_deref().unwrap_or("?")
                ));
            }
            if let Some(g) = &d.graphs {
                if g.used(crate::documents::nccl_dump::PATTERN_NVLS)
                    .next()
                    .is_some()
                {
                    s.nvls_on.push("NCCL's graph dump: NVLS channels".into());
                }
            }
        }
        match n.channels.as_ref().and_then(|c| c.nvls) {
            Some(0) => s
                .nvls_off
                .push("the run's NCCL log: 0 nvls channels".into()),
            Some(k) => s
                .nvls_on
                .push(format!("the run's NCCL log: {k} nvls channels")),
            None => {}
        }
        if n.nvls_support == Some(false) {
            s.nvls_off
                .push("the run's NCCL log: NVLS multicast support is not available".into());
        }
    }
    if let Some(l) = log {
        let at =
            |e: &crate::import::nccl_log::Evidence| format!("{}:{}: {}", e.file, e.line, e.text);
        for (net, lines) in &l.networks {
            if let Some(e) = lines.first() {
                s.used.push((net.clone(), at(e)));
            }
        }
        for (t, lines) in &l.transports {
            if let Some(e) = lines.first() {
                s.used.push((t.clone(), at(e)));
            }
        }
        if l.gdrdma {
            s.gdr_on.push("channels via .../GDRDMA in the log".into());
        }
        s.gdr_on.extend(l.gdr_enabled.iter().take(1).map(at));
        s.gdr_off.extend(l.gdr_disabled.iter().take(2).map(at));
        if let Some((c, e)) = &l.channel_counts {
            match c.nvls {
                Some(0) => s.nvls_off.push(at(e)),
                Some(_) => s.nvls_on.push(at(e)),
                None => {}
            }
        }
        if let Some((false, e)) = &l.nvls_support {
            s.nvls_off.push(at(e));
        }
    }
    for p in run.points.iter().filter_map(|p| p.nccl_algo.as_ref()) {
        if p.algo.starts_with("NVLS") && s.nvls_on.is_empty() {
            s.nvls_on
                .push(format!("NCCL's tuner chose {}/{}", p.algo, p.proto));
        }
    }
    s
}

/// Whether a name NCCL printed is the one a gate names: `IB` and `NET/IB` are one, `socket`
/// is `Socket` and `NET/Socket`, `P2P` covers `P2P/CUMEM`, `P2P/IPC` ...
fn names(gate: &str, used: &str) -> bool {
    let g = gate.to_ascii_lowercase();
    let u = used.to_ascii_lowercase();
    let strip = |s: &str| s.strip_prefix("net/").unwrap_or(s).to_string();
    let (g, u) = (strip(&g), strip(&u));
    u == g || u.starts_with(&format!("{g}/")) || u.split('/').next() == Some(g.as_str())
}

const NO_EVIDENCE: &str = "no NCCL_DEBUG=INFO lines or NCCL dumps to judge by: run the nccl backend (it reads them), or give the run's NCCL_DEBUG=INFO log with --log";

fn result(gate: &Gate, passed: bool, message: String) -> RuleResult {
    RuleResult {
        rule: gate.rule(),
        collective: None,
        size_bytes: None,
        measured: None,
        required: None,
        unit: String::new(),
        passed,
        message,
        subject: None,
    }
}

/// Each gate's verdict, with the evidence in its message.
pub fn judge(gates: &[Gate], run: &RunRecord, log: Option<&LogFacts>) -> Vec<RuleResult> {
    let s = seen(run, log);
    let any = !s.used.is_empty()
        || !s.gdr_on.is_empty()
        || !s.gdr_off.is_empty()
        || !s.nvls_on.is_empty()
        || !s.nvls_off.is_empty();
    gates
        .iter()
        .map(|gate| {
            if !any {
                return result(gate, false, format!("{}: {NO_EVIDENCE}", gate.rule()));
            }
            // NVLS channels say nothing of the network or the channels' transports.
            let names_nothing = s.used.iter().all(|(u, _)| u == "NVLS")
                && matches!(gate, Gate::RequireTransport(_) | Gate::Forbid(_));
            if names_nothing {
                return result(
                    gate,
                    false,
                    format!("{}: no line says which network or transports NCCL used (`Using network`, `Channel ... via`)", gate.rule()),
                );
            }
            match gate {
                Gate::RequireTransport(t) => match s.used.iter().find(|(u, _)| names(t, u)) {
                    Some((_, why)) => result(gate, true, format!("{t} used ({why})")),
                    None => {
                        let list: Vec<&str> = s.used.iter().map(|(u, _)| u.as_str()).collect();
                        result(gate, false, format!("{t} not used: NCCL used {}", list.join(", ")))
                    }
                },
                Gate::Forbid(t) => match s.used.iter().find(|(u, _)| names(t, u)) {
                    Some((_, why)) => result(gate, false, format!("{t} used ({why})")),
                    None => result(gate, true, format!("{t} not used")),
                },
                Gate::RequireGdr => match (s.gdr_on.first(), s.gdr_off.first()) {
                    (Some(on), None) => result(gate, true, format!("GPUDirect RDMA on ({on})")),
                    (_, Some(off)) => result(gate, false, format!("GPUDirect RDMA off ({off})")),
                    (None, None) => result(
                        gate,
                        false,
                        "GPUDirect RDMA not shown: no channel via .../GDRDMA and no `GPU Direct RDMA Enabled` line".into(),
                    ),
                },
                Gate::RequireNvls => match (s.nvls_on.first(), s.nvls_off.first()) {
                    (Some(on), _) => result(gate, true, format!("NVLS used ({on})")),
                    (None, Some(off)) => result(gate, false, format!("NVLS not used ({off})")),
                    (None, None) => result(gate, false, "NVLS not shown: no NVLS channel or tuner choice".into()),
                },
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(text: &str) -> LogFacts {
        let reader = Box::new(std::io::Cursor::new(text.as_bytes().to_vec()));
        let input = crate::import::text::Input::from_reader("run.log", reader).unwrap();
        crate::import::nccl_log::from_input(input).unwrap()
    }

    #[test]
    fn a_socket_fallback_fails_the_gates_that_name_it() {
        let l = log("h:1:2 [0] NCCL INFO NET/IB : No device found.\nh:1:2 [0] NCCL INFO Using network Socket\nh:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0\n");
        let run = RunRecord::blank(crate::model::Source::Imported, "nccl", String::new());
        let gates = [
            Gate::forbid("socket").unwrap(),
            Gate::require("transport=NET/IB").unwrap(),
            Gate::require("gdr").unwrap(),
            Gate::forbid("shm").unwrap(),
        ];
        let r = judge(&gates, &run, Some(&l));
        let verdicts: Vec<(String, bool)> = r.iter().map(|r| (r.rule.clone(), r.passed)).collect();
        assert_eq!(
            verdicts,
            [
                ("forbid socket".to_string(), false),
                ("require-transport NET/IB".to_string(), false),
                ("require-gdr".to_string(), false),
                ("forbid shm".to_string(), true),
            ]
        );
        assert!(r[0].message.contains("run.log:2"), "{}", r[0].message);
        assert!(
            r[1].message.contains("NCCL used Socket"),
            "{}",
            r[1].message
        );
    }

    #[test]
    fn ib_with_gdr_passes_and_nothing_to_judge_by_fails() {
        let l = log("h:1:2 [0] NCCL INFO Using network IB\nh:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA\n");
        let run = RunRecord::blank(crate::model::Source::Imported, "nccl", String::new());
        let gates = [
            Gate::require("transport=IB").unwrap(),
            Gate::require("gdr").unwrap(),
            Gate::forbid("socket").unwrap(),
        ];
        assert!(judge(&gates, &run, Some(&l)).iter().all(|r| r.passed));
        let none = judge(&gates, &run, None);
        assert!(none
            .iter()
            .all(|r| !r.passed && r.message.contains("--log")));
        assert!(Gate::require("fast").is_err());
        assert!(Gate::require("transport=").is_err());
    }
}
