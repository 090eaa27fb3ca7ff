//! What a pasted run's banner and command line say beyond its rows: the sizes it walked, from
//! the banner (`# nThread 1 nGpus 8 minBytes 8 maxBytes 17179869184 step: 2(factor) ...`) or
//! the command line (`-b 8 -e 16G -f 2`, read as nccl-tests 2.19.6 reads them, src/common.cu:
//! defaults -b 32M -e 32M, step 1M, factor 1), and the hosts a launcher was given (`-H
//! n1:8,n2:8`). A paste of only the summary lines is judged over these sizes.

use crate::model::SizeRange;

/// nccl-tests' defaults (src/common.cu: minBytes, maxBytes, stepBytes, stepFactor).
const DEFAULT: SizeRange = SizeRange {
    min_bytes: 32 << 20,
    max_bytes: 32 << 20,
    step_factor: 1,
    step_bytes: 1 << 20,
};

/// The banner line after its `#`: `nThread 1 nGpus 1 minBytes 8 maxBytes 134217728 step:
/// 2(factor) ...` (`step: 1048576(bytes)` with -i).
pub(super) fn from_banner(rest: &str) -> Option<SizeRange> {
    let tokens: Vec<&str> = rest.split_whitespace().collect();
    let after = |key: &str| {
        tokens
            .iter()
            .position(|t| *t == key)
            .and_then(|i| tokens.get(i + 1))
    };
    let number = |key: &str| after(key)?.parse::<u64>().ok();
    let (min_bytes, max_bytes) = (number("minBytes")?, number("maxBytes")?);
    let step = after("step:")?;
    let (value, unit) = step.split_once('(')?;
    let value = value.parse::<u64>().ok()?;
    let mut r = SizeRange {
        min_bytes,
        max_bytes,
        ..DEFAULT
    };
    match unit.trim_end_matches(')') {
        "factor" => r.step_factor = value,
        "bytes" => (r.step_factor, r.step_bytes) = (1, value),
        _ => return None,
    }
    Some(r)
}

/// The flags after the `*_perf` binary on a command line; `None` when the line runs none.
pub(super) fn from_command(line: &str) -> Option<SizeRange> {
    let tokens: Vec<&str> = line.split_whitespace().collect();
    let perf = tokens.iter().position(|t| t.contains("_perf"))?;
    let mut r = DEFAULT;
    let mut args = tokens[perf + 1..].iter();
    while let Some(flag) = args.next() {
        let (name, inline) = match flag.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (*flag, None),
        };
        let slot = match name {
            "-b" | "--minbytes" => &mut r.min_bytes,
            "-e" | "--maxbytes" => &mut r.max_bytes,
            "-i" | "--stepbytes" => &mut r.step_bytes,
            "-f" | "--stepfactor" => &mut r.step_factor,
            _ => continue,
        };
        let value = inline.or_else(|| args.next().copied())?;
        *slot = crate::units::parse_size(value).ok()?;
    }
    Some(r)
}

/// The hosts a launcher's `-H`/`--host` list names before the `*_perf` binary (`n1:8,n2:8`:
/// slots after the colon), in order, each once.
pub(super) fn hosts_from_command(line: &str) -> Vec<String> {
    let tokens: Vec<&str> = line.split_whitespace().collect();
    let Some(perf) = tokens.iter().position(|t| t.contains("_perf")) else {
        return Vec::new();
    };
    let mut hosts: Vec<String> = Vec::new();
    let mut it = tokens[..perf].iter();
    while let Some(t) = it.next() {
        let list = match t.split_once('=') {
            Some(("-H" | "--host" | "-host", v)) => Some(v),
            None if matches!(*t, "-H" | "--host" | "-host") => it.next().copied(),
            _ => None,
        };
        for host in list.into_iter().flat_map(|l| l.split(',')) {
            let name = host.split(':').next().unwrap_or("").trim();
            if !name.is_empty() && !hosts.iter().any(|h| h == name) {
                hosts.push(name.to_string());
            }
        }
    }
    hosts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn banners_and_command_lines_give_the_walk() {
        let r = from_banner("nThread 1 nGpus 1 minBytes 8 maxBytes 128 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0").unwrap();
        assert_eq!(r.sizes(), [8, 16, 32, 64, 128]);
        let r = from_banner("nThread 1 nGpus 8 minBytes 1048576 maxBytes 3145728 step: 1048576(bytes) warmup iters: 5").unwrap();
        assert_eq!(r.sizes(), [1 << 20, 2 << 20, 3 << 20]);
        let r =
            from_command("mpirun -np 16 ./build/all_reduce_perf -b 8 -e 16G -f 2 -g 1").unwrap();
        assert_eq!((r.min_bytes, r.max_bytes, r.step_factor), (8, 16 << 30, 2));
        assert_eq!(r.sizes().len(), 32);
        // Defaults: 32M only.
        assert_eq!(
            from_command("./all_reduce_perf -g 8").unwrap().sizes(),
            [32 << 20]
        );
        assert_eq!(
            from_command("all_gather_perf --minbytes=1K --maxbytes 4K -f 4")
                .unwrap()
                .sizes(),
            [1024, 4096]
        );
        assert!(from_command("python train.py").is_none());
        assert_eq!(
            hosts_from_command("mpirun --np 16 -H bm-h100-01:8,bm-h100-02:8 -x NCCL_DEBUG=INFO ./all_reduce_perf_mpi -b 8"),
            ["bm-h100-01", "bm-h100-02"]
        );
        assert_eq!(
            hosts_from_command("mpirun --host=a,b,a ./all_gather_perf"),
            ["a", "b"]
        );
        assert!(hosts_from_command("mpirun -np 2 ./all_reduce_perf -H x").is_empty());
        assert!(from_banner("nThread 1 nGpus 1").is_none());
    }
}
