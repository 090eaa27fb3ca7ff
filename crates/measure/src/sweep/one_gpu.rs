//! One GPU per rank of a communicator, refused before NCCL's init as NCCL itself would refuse
//! it, with the words NCCL does not give.

use crate::backend::rendezvous::ControlPlane;
use crate::exit::Failure;
use std::ffi::c_int;

/// Where one rank runs: the host name it reports, its GPU, and the NCCL_TESTS_SPLIT group
/// (communicator) it joins.
pub(super) struct Place<'a> {
    pub host: &'a str,
    pub bus_id: Option<String>,
    pub device: c_int,
    pub color: usize,
}

/// Two ranks of one communicator on one GPU, refused before NCCL's init, which would stop at
/// its own check (src/init.cc v2.28.9 903-904, initTransportsRank: "Duplicate GPU detected :
/// rank %d and rank %d both on CUDA device %lx", ncclInvalidUsage) after the rendezvous, with
/// no word on why. NCCL compares the peers of one communicator only, by host hash and bus id:
/// ranks of different NCCL_TESTS_SPLIT colors may share a GPU, as under nccl-tests. Every rank
/// exchanges what NCCL compares, so all refuse alike, naming the pair, the GPU and the counts.
pub(super) fn one_gpu_per_rank(
    control: &mut dyn ControlPlane,
    place: Place,
    (ranks_here, visible): (usize, c_int),
) -> Result<(), Failure> {
    let gpu = place
        .bus_id
        .unwrap_or_else(|| format!("device {}", place.device));
    let identity = host_identity(place.host, std::env::var("NCCL_HOSTID").ok(), boot_id());
    let mine = format!("{}\t{identity}\t{gpu}\t{}", place.color, place.host);
    let all = control
        .allgather(mine.as_bytes())
        .map_err(|e| crate::backend::failure("exchanging which GPU each rank uses", e))?;
    let places: Vec<String> = all
        .iter()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .collect();
    match shared_gpu(&places) {
        None => Ok(()),
        Some((a, b)) => {
            let mut fields = places[a].splitn(4, '\t').skip(2);
            let (gpu, host) = (fields.next().unwrap_or(""), fields.next().unwrap_or(""));
            Err(Failure::usage(format!(
                "ranks {a} and {b} of one communicator would both use GPU {gpu} on host {host}, which NCCL refuses (\"Duplicate GPU detected\"); {ranks_here} ranks run on this host and each process sees {visible} GPU(s): start no more ranks per host than it has GPUs, and give each process its own (CUDA_VISIBLE_DEVICES, or the local rank's device)"
            )))
        }
    }
}

/// The string NCCL hashes to tell one machine from another (src/misc/utils.cc v2.28.9 79-108,
/// getHostHashOnce): `NCCL_HOSTID` alone when it is set, else the full host name followed by
/// the kernel's boot id. Nodes with one container host name ("localhost") and GPUs on the same
/// bus numbers are thus not one GPU, and containers given one NCCL_HOSTID are one host.
fn host_identity(host: &str, nccl_hostid: Option<String>, boot_id: Option<String>) -> String {
    match nccl_hostid {
        Some(id) => id,
        None => format!("{host}{}", boot_id.unwrap_or_default()),
    }
}

/// `/proc/sys/kernel/random/boot_id`, its first word (NCCL reads it with `%ms`).
fn boot_id() -> Option<String> {
    let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    text.split_whitespace().next().map(str::to_string)
}

/// The first two ranks whose `color\thost id\tgpu` are one GPU of one communicator.
fn shared_gpu(places: &[String]) -> Option<(usize, usize)> {
    let key = |p: &String| p.splitn(4, '\t').take(3).collect::<Vec<_>>().join("\t");
    let keys: Vec<String> = places.iter().map(key).collect();
    keys.iter()
        .enumerate()
        .find_map(|(b, k)| keys[..b].iter().position(|q| q == k).map(|a| (a, b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_first_pair_of_ranks_on_one_gpu_of_one_communicator_is_named() {
        assert_eq!(
            shared_gpu(&p(&["0\ta\t0000:18:00.0\ta", "0\ta\t0000:28:00.0\ta"])),
            None
        );
        assert_eq!(
            shared_gpu(&p(&["0\ta\t0000:18:00.0\ta", "0\tb\t0000:18:00.0\tb"])),
            None
        );
        assert_eq!(
            shared_gpu(&p(&[
                "0\ta\tx\ta",
                "0\ta\ty\ta",
                "0\ta\ty\ta",
                "0\ta\tx\ta"
            ])),
            Some((1, 2))
        );
        // Two NCCL_TESTS_SPLIT colors on one GPU: two communicators, as NCCL and nccl-tests
        // run them.
        assert_eq!(shared_gpu(&p(&["0\ta\tx\ta", "1\ta\tx\ta"])), None);
        assert_eq!(
            shared_gpu(&p(&["0\ta\tx\ta", "1\ta\tx\ta", "0\ta\tx\ta"])),
            Some((0, 2))
        );
    }

    #[test]
    fn the_host_is_told_apart_as_nccl_hashes_it() {
        // One container host name on two machines (two boot ids): two hosts.
        let one = host_identity("localhost", None, Some("boot1".into()));
        let two = host_identity("localhost", None, Some("boot2".into()));
        assert_ne!(one, two);
        // NCCL_HOSTID alone: containers with different names and one id are one host, and
        // the name no longer tells them apart (NCCL overwrites it with the id).
        assert_eq!(
            host_identity("pod-a", Some("rack7".into()), Some("boot1".into())),
            host_identity("pod-b", Some("rack7".into()), Some("boot2".into()))
        );
        assert_eq!(
            host_identity("node1", None, Some("b".into())),
            "node1b".to_string()
        );
    }
}
