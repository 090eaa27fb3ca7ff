//! A memory plan as the report shows it: the model and setup in one line each, the GPU's and
//! the host's verdicts with their terms, the traffic, the changes ranked as the plan ranks
//! them, and the out-of-memory error the plan was held against. Every figure is formatted here
//! with its unit and the word for where it came from (modelled, or observed for the error's).

use crate::documents::memory::{Budget, Change, MemoryPlan, Observed};
use crate::render::memory::{gib, shortfall, signed, to_the_peak, trainable, verdict};
use crate::render::safe;
use crate::units::format_size;
use crate::units::size_text;
use serde::Serialize;

/// A value from the plan's input (a model name, a config path, a log line), capped.
fn input(text: &str) -> String {
    safe::cap(text, safe::VALUE_CHARS).into_owned()
}

#[derive(Debug, Clone, Serialize)]
pub struct MemoryView {
    pub file: String,
    pub name: String,
    /// "1 GPU" / "8 GPUs", for the heading.
    pub gpus: String,
    /// Name, parameters (trainable), where the shape came from.
    pub model: String,
    pub setup: String,
    pub gpu: BudgetView,
    pub host: BudgetView,
    pub traffic: String,
    pub link: Option<String>,
    /// Changes that fit first (cheapest first), as the plan ranks them.
    pub changes: Vec<ChangeView>,
    pub notes: Vec<String>,
    pub observed: Option<ObservedView>,
}

#[derive(Debug, Clone, Serialize)]
pub struct BudgetView {
    /// "GPU (modelled)", "host RAM per node (modelled)".
    pub title: String,
    /// `render::memory::verdict`'s sentence.
    pub verdict: String,
    /// True when the capacity is known and the total exceeds it.
    pub short: bool,
    pub capacity_source: String,
    pub terms: Vec<TermView>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TermView {
    pub size: String,
    pub name: String,
    pub basis: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChangeView {
    pub fits: bool,
    pub change: String,
    /// What the changed setup leaves on the GPU, and on the host where it is short (modelled).
    pub memory: String,
    pub cost: String,
    /// NCCL and PCIe bytes it adds per GPU per step (modelled).
    pub traffic: String,
}

/// The error's figures, each with its unit and source.
#[derive(Debug, Clone, Serialize)]
pub struct ObservedView {
    pub source: String,
    pub gpu: String,
    pub requested: String,
    pub free: String,
    pub short: String,
    pub in_use: String,
    pub in_use_basis: String,
    pub other_processes: Option<String>,
    /// The model's tensor of the failed allocation's size, or that none matches.
    pub matched: String,
    pub modelled_before: String,
    pub unexplained: String,
    /// How far the step's peak lies beyond the failed allocation (modelled), when it matched.
    pub peak: Option<String>,
}

/// A parameter count as people say it: "2.51 B", "124.4 M".
fn params(n: u64) -> String {
    if n >= 1_000_000_000 {
        format!("{:.2} B", n as f64 / 1e9)
    } else {
        format!("{:.1} M", n as f64 / 1e6)
    }
}

fn budget(title: &str, b: &Budget) -> BudgetView {
    BudgetView {
        title: title.to_string(),
        verdict: verdict(b),
        short: b.fits() == Some(false),
        capacity_source: b.capacity_source.as_deref().map(input).unwrap_or_default(),
        terms: b
            .terms
            .iter()
            .map(|t| TermView {
                size: gib(t.bytes),
                name: input(&t.name),
                basis: input(&t.basis),
            })
            .collect(),
    }
}

fn change(c: &Change) -> ChangeView {
    let comm = c
        .added_comm_s
        .map(|s| format!(", {:+.1} ms on the link", s * 1e3))
        .unwrap_or_default();
    ChangeView {
        fits: c.fits,
        change: input(&c.change),
        memory: format!("{} (modelled)", shortfall(c)),
        cost: safe::cap(&c.cost, safe::TEXT_CHARS).into_owned(),
        traffic: format!(
            "NCCL {}{comm}, PCIe {} per GPU per step (modelled)",
            signed(c.added_bus_bytes_per_gpu),
            signed(c.added_host_device_bytes_per_gpu)
        ),
    }
}

fn observed(o: &Observed, gpu: &Budget) -> ObservedView {
    let observed = |bytes: f64| format!("{} (observed)", gib(bytes));
    ObservedView {
        source: input(&o.source),
        gpu: o.gpu.map_or("the GPU".into(), |g| format!("GPU {g}")),
        requested: format!("{} (observed)", size_text(o.requested_bytes)),
        free: o.free_bytes.map_or("not given".into(), |f| {
            format!("{} (observed)", size_text(f))
        }),
        short: o
            .short_at_failure_bytes
            .map_or("-".into(), |s| format!("{} (observed)", size_text(s))),
        in_use: observed(o.in_use_bytes),
        in_use_basis: input(&o.in_use_basis),
        other_processes: (o.other_processes_bytes > 0.0).then(|| observed(o.other_processes_bytes)),
        matched: o.matched.as_deref().map_or_else(
            || "matches no tensor the model counts; taken as the step's peak".to_string(),
            |m| format!("is {}", input(m)),
        ),
        modelled_before: format!("{} (modelled)", gib(o.modelled_before_bytes)),
        unexplained: format!(
            "{} (observed less modelled), carried into every figure of the plan",
            gib(o.unexplained_bytes)
        ),
        peak: to_the_peak(o, gpu).map(|p| format!("{p} (modelled)")),
    }
}

pub fn memory_view(file: &str, plan: &MemoryPlan) -> MemoryView {
    let (m, s) = (&plan.model, &plan.setup);
    let gpu_title = match plan.observed {
        Some(_) => "GPU (modelled, with the observed unexplained memory)",
        None => "GPU (modelled)",
    };
    let gpus = format!(
        "{} GPU{}",
        s.world_size,
        if s.world_size == 1 { "" } else { "s" }
    );
    let t = &plan.traffic;
    let time = t
        .comm_s
        .map(|s| format!(", {:.1} ms on the link", s * 1e3))
        .unwrap_or_default();
    MemoryView {
        file: input(file),
        name: input(&m.name),
        gpus: gpus.clone(),
        model: format!(
            "{}: {} parameters ({} trainable); {}",
            input(&m.name),
            params(m.params),
            params(m.trainable_params),
            input(&m.source)
        ),
        setup: format!(
            "{} ({} per node), {} (offload optimizer: {}, parameters: {}), {} precision, {}; seq {} x micro-batch {}, checkpointing {}, FlashAttention {}, logits {}",
            gpus,
            s.gpus_per_node,
            s.strategy.name(),
            s.offload_optimizer.name(),
            s.offload_params.name(),
            s.precision.name(),
            input(&trainable(&s.trainable)),
            s.seq_len,
            s.micro_batch,
            s.checkpointing.name(),
            if s.flash_attention { "on" } else { "off" },
            s.logits.name()
        ),
        gpu: budget(gpu_title, &plan.gpu),
        // The observed memory is the GPU's: the host's figures are the model's alone.
        host: budget("host RAM per node (modelled)", &plan.host),
        traffic: format!(
            "{} on the NCCL bus{time}, {} between host and GPU, per GPU per step (modelled)",
            format_size(t.bus_bytes_per_gpu as u64),
            format_size(t.host_device_bytes_per_gpu as u64)
        ),
        link: plan.link.as_deref().map(input),
        changes: plan.changes.iter().map(change).collect(),
        notes: plan
            .notes
            .iter()
            .map(|n| safe::cap(n, safe::TEXT_CHARS).into_owned())
            .collect(),
        observed: plan.observed.as_ref().map(|o| observed(o, &plan.gpu)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::memory::observed::{calibrate, Oom};
    use crate::analysis::memory::seeds::{seed_004_offload as seed_004, seed_004_oom};
    use crate::analysis::memory::{plan, Setup};
    use crate::report::{recommend, verdict, Documents, Named};

    /// The plan with the report's error held against it ("Tried to allocate 500.00 MiB ...
    /// 243.94 MiB is free ... this process has 22.66 GiB memory in use").
    fn seed_004_observed() -> MemoryPlan {
        let mut setup = seed_004();
        let oom = Oom {
            source: "oom.txt:1".into(),
            ..seed_004_oom()
        };
        let (observed, terms, notes) = calibrate(&setup, &oom).unwrap_or_else(|e| panic!("{e}"));
        setup.observed_terms = terms;
        plan(&setup, None, None, notes, Some(observed))
    }

    fn documents(plan: MemoryPlan) -> Documents {
        Documents {
            memory: vec![Named {
                file: "plan.json".into(),
                doc: plan,
            }],
            ..Documents::default()
        }
    }

    #[test]
    fn every_figure_of_the_view_says_where_it_came_from() {
        let view = memory_view("plan.json", &seed_004_observed());
        assert_eq!(view.gpus, "1 GPU");
        assert!(view
            .model
            .starts_with("gemma-2b: 3.01 B parameters (2.51 B trainable)"));
        assert!(
            view.setup
                .starts_with("1 GPU (1 per node), full-shard (zero-3) (offload optimizer: cpu"),
            "{}",
            view.setup
        );
        assert!(view.gpu.short, "the peak is 4.29 GiB short");
        assert!(view.gpu.verdict.starts_with("does NOT fit"));
        assert_eq!(
            view.gpu.title,
            "GPU (modelled, with the observed unexplained memory)"
        );
        // The error's memory is the GPU's: the host is the model's alone.
        assert_eq!(view.host.title, "host RAM per node (modelled)");
        assert!(!view.host.short);
        let o = view.observed.as_ref().expect("the observed block");
        assert_eq!(o.gpu, "GPU 0");
        assert_eq!(o.requested, "500.00 MiB (observed)");
        assert_eq!(o.free, "243.94 MiB (observed)");
        assert_eq!(o.short, "256.06 MiB (observed)");
        assert_eq!(o.in_use, "22.66 GiB (observed)");
        assert!(o.matched.contains("16-bit logits"), "{}", o.matched);
        assert!(o.unexplained.starts_with("11.53 GiB"), "{}", o.unexplained);
        assert!(o
            .peak
            .as_deref()
            .is_some_and(|p| p.contains("4.29 GiB short")));
        // The changes as the plan ranks them, the first one that fits first.
        assert!(view.changes[0].fits);
        assert!(view
            .changes
            .iter()
            .all(|c| c.memory.ends_with("(modelled)")));
        assert!(view.changes.iter().any(|c| !c.fits));
    }

    #[test]
    fn a_plan_short_of_its_gpu_degrades_the_report_and_its_cheapest_fitting_change_is_advised() {
        let docs = documents(seed_004_observed());
        let v = verdict::verdict(&docs);
        assert_eq!(v.state, verdict::State::Degraded);
        assert!(
            v.sentence.contains("gemma-2b") && v.sentence.contains("4.29 GiB short"),
            "{}",
            v.sentence
        );
        let recs = recommend::recommendations(&docs);
        let first_fit = &docs.memory[0].doc.changes[0];
        assert_eq!(recs.len(), 1, "{recs:#?}");
        assert!(recs[0].action.contains(&first_fit.change), "{:?}", recs[0]);
        assert_eq!(recs[0].origin, "simulate memory");
        assert!(recs[0].evidence.iter().any(|e| e.contains("oom.txt:1")));
    }

    #[test]
    fn a_plan_that_fits_leaves_the_report_healthy_and_advises_nothing() {
        let docs = documents(plan(&seed_004(), None, None, Vec::new(), None));
        let v = verdict::verdict(&docs);
        assert_eq!(v.state, verdict::State::Healthy);
        assert!(v.sentence.contains("fits"), "{}", v.sentence);
        assert!(recommend::recommendations(&docs).is_empty());
        assert!(memory_view("p", &docs.memory[0].doc).observed.is_none());
    }

    #[test]
    fn a_plan_short_of_its_host_degrades_the_report_too() {
        // No offload host big enough for 16 B per parameter and DeepSpeed's margin.
        let setup = Setup {
            host_capacity: Some((16e9, "test".into())),
            ..seed_004()
        };
        let docs = documents(plan(&setup, None, None, Vec::new(), None));
        let v = verdict::verdict(&docs);
        assert_eq!(v.state, verdict::State::Degraded);
        assert!(v.sentence.contains("host"), "{}", v.sentence);
    }
}
