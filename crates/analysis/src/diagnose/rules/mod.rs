//! The rules, as one table: each row is a finding id with its default severity, explanation,
//! fix and source as data, and the function that looks for it in the `Inputs`. A function
//! returns one `Hit` per finding it raises (title and evidence; a severity when it differs
//! from the row's); everything a reader of the finding needs besides is in the row.

mod causes;
mod consistency;
mod fallback;
mod health;
mod host;
mod links;
mod loader;
mod matrix;
mod messages;
mod placement;
mod results;
mod trace;

use super::facts::Inputs;
use super::finding::{Finding, Hit, Severity};

/// One row of the table.
pub struct Rule {
    pub id: &'static str,
    pub severity: Severity,
    pub explanation: &'static str,
    pub fix: &'static str,
    pub source: &'static str,
    pub check: fn(&Inputs) -> Vec<Hit>,
}

const SRC_TROUBLESHOOTING: &str = "NCCL user guide, troubleshooting (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html) and environment variables (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html); NCCL P2P cut-off, https://github.com/NVIDIA/nccl/blob/master/src/graph/paths.cc (ncclTopoCheckP2p); TCP ≤60% of line rate, https://github.com/NVIDIA/nccl/issues/209";

/// Every rule ncclprobe knows, in the order they are checked.
pub static RULES: &[Rule] = &[
    Rule {
        id: "gpu.process-on-multiple-gpus",
        severity: Severity::Error,
        explanation: "A training process that should own one GPU also has a context (and memory, and kernels) on another. Its peers then share that GPU: one GPU sits at low utilisation while the other is oversubscribed, and steps get many times slower.",
        fix: "Give each process exactly one GPU: export CUDA_VISIBLE_DEVICES=<its GPU> before starting it, or call torch.cuda.set_device(local_rank) before any CUDA work. torchrun sets LOCAL_RANK for each process; it does not set CUDA_VISIBLE_DEVICES.",
        source: "a user report: two training processes, one started without CUDA_VISIBLE_DEVICES, each with memory on both GPUs (nvidia-smi process list), one GPU at 1% and steps 12x slower; PyTorch DDP docs: one process per GPU, https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html",
        check: placement::process_on_multiple_gpus,
    },
    Rule {
        id: "nvlink.down",
        severity: Severity::Error,
        explanation: "A GPU with fewer active NVLinks than its identical siblings has lost links (a bad bridge, cable tray or NVSwitch port, or a link disabled after errors); NCCL routes around them over fewer links or PCIe, and every collective that includes the GPU slows down.",
        fix: "Check `nvidia-smi nvlink -s` and the error counters (`nvidia-smi nvlink -e`), reseat bridges, run DCGM diagnostics (`dcgmi diag -r 2`), and keep the node out of the job pool until all links are up.",
        source: "DCGM diagnostics PCIe plugin, gpu_nvlinks_expected_up (NVLink down), https://docs.nvidia.com/datacenter/dcgm/latest/reference/diagnostics/plugins/pcie.html",
        check: links::nvlink_down,
    },
    Rule {
        id: "gpu.ecc-uncorrectable",
        severity: Severity::Error,
        explanation: "Uncorrectable (double-bit) ECC errors mean data in GPU memory was lost: NVIDIA's Xid 48 event; the application that touched it may have computed on garbage or crashed, and the GPU needs a reset to retire or remap the row. Collectives on this GPU are not trustworthy until then.",
        fix: "Drain the node, reset the GPU (`nvidia-smi -r` with no processes, or reboot), and check `nvidia-smi -q -d ECC,ROW_REMAPPER` afterwards; repeated events mean an RMA.",
        source: "NVIDIA GPU memory error management (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt); NVIDIA Xid catalog (Xid 48: double-bit ECC error); NVML nvmlDeviceGetTotalEccErrors",
        check: health::ecc_uncorrected,
    },
    Rule {
        id: "gpu.memory-repair",
        severity: Severity::Error,
        explanation: "A100 and later GPUs replace a failing memory row at the next reset (row remapping; older GPUs retire the page). Pending: the GPU runs with the bad row until it is reset. Failed: no spare row was left, and the GPU must be replaced.",
        fix: "Pending: drain and reset the GPU (`nvidia-smi -r`, or reboot) so the remapping takes effect. Failed: take the GPU out of service and open an RMA.",
        source: "NVIDIA GPU memory error management: row remapping (pending, failure) and page retirement; NVML nvmlDeviceGetRemappedRows, nvmlDeviceGetRetiredPagesPendingStatus",
        check: health::memory_repair,
    },
    Rule {
        id: "pcie.replays",
        severity: Severity::Warning,
        explanation: "PCIe replays are link-level retransmissions after a corrupted packet: a marginal riser, slot, cable or retimer. A link that replays keeps working but loses bandwidth, and a rising count precedes the GPU falling off the bus (Xid 79).",
        fix: "Compare the counter between runs (`nvidia-smi -q -d PCIE` shows Replays); reseat the GPU or riser, check the slot's lane width and generation under load, and keep the node out of the pool if the count grows.",
        source: "NVML nvmlDeviceGetPcieReplayCounter; Linux AER sysfs aer_dev_correctable (BadTLP, BadDLLP, replay Rollover/Timeout); DCGM health watches (PCIe replay rate); NVIDIA Xid catalog (Xid 79)",
        check: health::pcie_replays,
    },
    Rule {
        id: "pcie.aer-uncorrectable",
        severity: Severity::Error,
        explanation: "The PCIe link to the GPU delivered errors its link layer could not recover (AER non-fatal or fatal: a poisoned or malformed packet, a completion timeout, a surprise link down). Transfers to and from the GPU may have failed or stalled; it often comes before Xid 79 (the GPU falls off the bus).",
        fix: "Drain the node; check `lspci -vvv -s ADDRESS` (UESta) and the kernel log for `AER:` lines, reseat the GPU, riser or cable, update the BIOS and retimer firmware, and keep the node out of the pool until a sweep runs clean.",
        source: "Linux PCIe AER sysfs ABI (Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats: aer_dev_fatal, aer_dev_nonfatal); NVIDIA Xid catalog (Xid 79)",
        check: health::pcie_uncorrectable,
    },
    Rule {
        id: "nvlink.errors",
        severity: Severity::Warning,
        explanation: "NVLink CRC errors are corrupted flits or data caught by the link; replays retransmit them; a recovery retrains the link. A few over months are normal; a link that keeps counting loses bandwidth to retransmission and may go down, taking NCCL's NVLink paths with it.",
        fix: "Watch `nvidia-smi nvlink -e` between runs; reset the counters and re-run a sweep; a link that keeps counting needs the baseboard or NVSwitch tray serviced (`dcgmi diag -r 3`).",
        source: "NVML nvmlDeviceGetNvLinkErrorCounter (DL replay, recovery, CRC flit, CRC data); DCGM NVLink health watch",
        check: health::nvlink_errors,
    },
    Rule {
        id: "gpu.throttled",
        severity: Severity::Warning,
        explanation: "The GPU's clocks are being held down by its thermal or power protection (not by idling or by a configured cap): every kernel, NCCL's included, runs slower, and ranks on this GPU turn into stragglers.",
        fix: "Check `nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER`: airflow, fan and inlet temperature, power supply and brake signals; compare with the other GPUs of the node.",
        source: "NVML nvmlDeviceGetCurrentClocksThrottleReasons (HW slowdown, SW/HW thermal slowdown, HW power brake)",
        check: health::throttled,
    },
    Rule {
        id: "gpu.persistence-off",
        severity: Severity::Info,
        explanation: "Without persistence mode the driver tears the GPU state down when the last client exits and rebuilds it at the next start: each job pays seconds of initialisation, and counters read between jobs start from nothing.",
        fix: "Run nvidia-persistenced (the recommended way) or `nvidia-smi -pm 1` as root on compute nodes.",
        source: "NVIDIA driver persistence documentation (docs.nvidia.com/deploy/driver-persistence); NVML nvmlDeviceGetPersistenceMode",
        check: health::persistence_off,
    },
    Rule {
        id: "gpu.xid",
        severity: Severity::Error,
        explanation: "The NVIDIA driver logs an Xid event when a GPU reports an error: some are the application's own fault (13, 31, 43: a bad address, a killed context), others are the GPU, its memory or its links failing (48, 64, 74, 79, 95, 119 ...). A collective that hung or slowed near one of the latter was not NCCL's doing.",
        fix: "Look the number up in NVIDIA's Xid catalog; for hardware Xids drain the node, reset the GPU (or reboot), run `dcgmi diag -r 3`, and open an RMA if it repeats; for application Xids fix the program, and suspect the GPU only when they recur across jobs.",
        source: "NVIDIA Xid catalog (docs.nvidia.com/deploy/xid-errors); kernel log via /dev/kmsg or pasted dmesg",
        check: health::xid_events,
    },
    Rule {
        id: "env.cuda-visible-devices-unset",
        severity: Severity::Warning,
        explanation: "Without CUDA_VISIBLE_DEVICES (or an early torch.cuda.set_device), every process sees every GPU and libraries may create contexts on GPU 0 or on all GPUs.",
        fix: "Set CUDA_VISIBLE_DEVICES per process, or call torch.cuda.set_device(local_rank) first thing.",
        source: "a user report: a training process started without CUDA_VISIBLE_DEVICES held memory on both GPUs (nvidia-smi process list), one GPU fell to 1% and steps became 12x slower; PyTorch DDP docs, https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html",
        check: placement::cuda_visible_devices_unset,
    },
    Rule {
        id: "env.shm-disabled",
        severity: Severity::Warning,
        explanation: "With SHM off, GPUs without P2P fall back to the network transport (sockets) even inside one machine: ~1 GB/s instead of PCIe speeds. Often set to work around /dev/shm errors on WSL2 or in containers.",
        fix: "Unset NCCL_SHM_DISABLE and fix the cause instead: in a container, a larger /dev/shm (docker --shm-size=8g or --ipc=host; on Kubernetes an emptyDir with medium: Memory at /dev/shm). On WSL2, where multi-GPU jobs fail to create their /dev/shm segments (https://github.com/microsoft/WSL/issues/12467), nothing inside WSL fixes it: keep the setting and expect socket speeds, or train on native Linux.",
        source: SRC_TROUBLESHOOTING,
        check: placement::shm_disabled,
    },
    Rule {
        id: "env.p2p-disabled",
        severity: Severity::Warning,
        explanation: "With P2P off (NCCL_P2P_DISABLE=1, or NCCL_P2P_LEVEL=LOC or 0, which NCCL reads as the same level), NCCL bounces GPU-to-GPU traffic through host memory (SHM), costing bandwidth and latency on PCIe and far more on NVLink systems.",
        fix: "Unset NCCL_P2P_DISABLE and NCCL_P2P_LEVEL unless P2P is known broken on this platform (then fix ACS/IOMMU settings).",
        source: SRC_TROUBLESHOOTING,
        check: placement::p2p_disabled,
    },
    Rule {
        id: "env.ib-disabled",
        severity: Severity::Warning,
        explanation: "With IB off, multi-node traffic uses TCP sockets, typically ≤60% of the NIC's line rate and a fraction of RDMA.",
        fix: "Unset NCCL_IB_DISABLE on hosts with IB/RoCE, and check that libibverbs and the NICs are visible in the container.",
        source: SRC_TROUBLESHOOTING,
        check: placement::ib_disabled,
    },
    Rule {
        id: "p2p.unavailable",
        severity: Severity::Warning,
        explanation: "NCCL cannot use P2P/IPC, so intra-node traffic goes through host memory (SHM) or, with SHM off, sockets. GeForce cards do not support P2P; WSL2 lacks legacy CUDA IPC; ACS/IOMMU settings or virtualisation can also block it.",
        fix: "Expect SHM-level bandwidth (≈0.75 of the PCIe link at best); on servers check ACS/IOMMU (disable ACS on PCIe switches, iommu=pt); do not set NCCL_SHM_DISABLE on such machines.",
        source: "GeForce P2P: sjeaugey, https://github.com/NVIDIA/nccl-tests/issues/287; WSL legacy IPC: https://github.com/NVIDIA/nccl/blob/master/src/transport/p2p.cc",
        check: links::p2p_unavailable,
    },
    Rule {
        id: "wsl2",
        severity: Severity::Warning,
        explanation: "WSL2 has no CUDA legacy IPC (no NCCL P2P) and multi-GPU jobs often fail creating /dev/shm segments; the usual workaround NCCL_SHM_DISABLE=1 leaves only sockets (~1 GB/s; a user report measured ~0.5 GB/s on two RTX 4090s). No published WSL2 baseline exists.",
        fix: "Prefer native Linux for multi-GPU training; under WSL2 use gradient accumulation with no_sync() to all-reduce less often, or train on one GPU (see `ncclprobe simulate ddp`).",
        source: "WSL legacy IPC: https://github.com/NVIDIA/nccl/blob/master/src/transport/p2p.cc; NCCL_SHM_DISABLE, https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html; a user report: 2x RTX 4090 under WSL2 with NCCL_SHM_DISABLE=1, all_reduce 200 MB in 390 ms; https://github.com/microsoft/WSL/issues/12467",
        check: placement::wsl2,
    },
    Rule {
        id: "transport.socket-intranode",
        severity: Severity::Error,
        explanation: "Inside one host NCCL should use P2P or SHM; sockets mean both were unavailable or disabled (NCCL_P2P_DISABLE/NCCL_SHM_DISABLE, WSL2, containers with tiny /dev/shm, or ranks in separate containers). Expect ~1 GB/s.",
        fix: "Re-enable SHM (unset NCCL_SHM_DISABLE, enlarge /dev/shm) and P2P where supported; run ranks in one container/pod with --ipc=host.",
        source: "NCCL_SHM_DISABLE ('NCCL will use the network'), https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html; WSL2 /dev/shm failures, https://github.com/microsoft/WSL/issues/12467; TCP ≤60% of line rate, https://github.com/NVIDIA/nccl/issues/209; an unreadable NIC speed taken as 10 Gb/s, https://github.com/NVIDIA/nccl/issues/1053",
        check: links::socket_intranode,
    },
    Rule {
        id: "transport.socket-internode",
        severity: Severity::Warning,
        explanation: "Multi-host traffic is on TCP. On clusters with InfiniBand/RoCE/EFA this means the fabric is not used (missing libibverbs or plugin, NCCL_IB_DISABLE, wrong HCA). If the 'hosts' are containers on one machine, this is intra-node traffic over sockets.",
        fix: "Check `ibv_devinfo` inside the job, mount /dev/infiniband, install the NCCL net plugin (aws-ofi-nccl for EFA), unset NCCL_IB_DISABLE; for pods on one node use hostIPC / one pod.",
        source: "RDMA: 24 GB/s per 200G NIC, https://github.com/NVIDIA/nccl-tests/issues/119; TCP ≤60% of line rate, https://github.com/NVIDIA/nccl/issues/209",
        check: links::socket_internode,
    },
    Rule {
        id: "transport.gdr-disabled",
        severity: Severity::Info,
        explanation: "NCCL stages network traffic through host memory when the GPU and NIC are too far apart in the PCIe tree or nv_peer_mem / dma-buf is missing.",
        fix: "Load nvidia-peermem (or use dma-buf), and check NCCL_NET_GDR_LEVEL against the topology.",
        source: "NCCL environment variables: NCCL_NET_GDR_LEVEL, https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html; NCCL troubleshooting, GPU Direct, https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html#gpu-direct",
        check: links::gdr_disabled,
    },
    Rule {
        id: "net.socket-fallback",
        severity: Severity::Error,
        explanation: "NCCL picked its socket (TCP) transport while RDMA NICs exist: the IB plugin found no usable device on a host (no libibverbs or /dev/infiniband in the container, NCCL_IB_DISABLE, a missing net plugin such as aws-ofi-nccl) and NCCL carried on over TCP, often over IPoIB interfaces, at a fraction of the fabric's rate. Nothing fails: the run is just slow, or hosts that chose different transports cannot connect at all.",
        fix: "On each host: `ibv_devinfo` inside the job's container (mount /dev/infiniband, install rdma-core/libibverbs), unset NCCL_IB_DISABLE and NCCL_NET=Socket, install the fabric's net plugin; then check that every rank's log says `Using network IB` (or the plugin's name). Gate it: `ncclprobe qualify --forbid socket`.",
        source: "NCCL environment variables (NCCL_IB_DISABLE, NCCL_NET) and troubleshooting; https://github.com/NVIDIA/nccl-tests/issues/188 (one host on Socket, the other on IB); aws-samples EFA checks (grep for the provider)",
        check: fallback::socket_fallback,
    },
    Rule {
        id: "net.gdr-unavailable",
        severity: Severity::Warning,
        explanation: "NCCL's dump says the NIC cannot reach GPU memory (net gdr=0) although it is an RDMA NIC within NCCL's GPUDirect distance of a GPU that supports it: the peer-memory module (nvidia-peermem / nv_peer_mem) is not loaded or dma-buf is unavailable, so every network transfer is staged through host memory.",
        fix: "Load nvidia-peermem (`modprobe nvidia-peermem`) or use a kernel and driver with dma-buf (NCCL_DMABUF_ENABLE=1, the open kernel modules); check with NCCL_DEBUG=INFO that channels say `via NET/IB/N/GDRDMA`. Gate it: `ncclprobe qualify --require gdr`.",
        source: "NCCL src/graph/topo.cc (net gdr from the plugin's ptrSupport), paths.cc ncclTopoCheckGdr; NCCL troubleshooting: GPU Direct RDMA",
        check: fallback::gdr_unavailable,
    },
    Rule {
        id: "nvls.unused",
        severity: Severity::Warning,
        explanation: "Hopper (sm 90) and later GPUs on NVSwitches can run all-reduce and reduce-scatter in the switch (NVLS, NVLink SHARP), which NCCL prefers from medium sizes up; here NCCL built no NVLS channel or says multicast is unavailable: the Fabric Manager or IMEX is not running, the driver/CUDA lacks multicast, the process has too little memory for NVLS buffers, or NCCL_NVLS_ENABLE=0 was set.",
        fix: "Check `nvidia-smi -q | grep -i fabric` (state Completed), the nvidia-fabricmanager service, CUDA driver >= 530 and NCCL >= 2.17; unset NCCL_NVLS_ENABLE; rerun with NCCL_DEBUG=INFO and look for `NVLS multicast support is available`. Gate it: `ncclprobe qualify --require nvls`.",
        source: "NCCL environment variables (NCCL_NVLS_ENABLE); NCCL src/transport/nvls.cc; NVIDIA reference recipes split the NCCL gate into network and NVLS parts",
        check: fallback::nvls_unused,
    },
    Rule {
        id: "rail.nic-across-socket",
        severity: Severity::Warning,
        explanation: "NCCL's graph sends a GPU's inter-node traffic through a NIC under the other CPU while a NIC sits beside the GPU: each transfer crosses the CPU interconnect, GPUDirect RDMA is off at that distance, and the rails are unbalanced. Usually NCCL_IB_HCA or NCCL_CROSS_NIC constraints, a NIC that is down, or a stale NCCL_TOPO_FILE.",
        fix: "Check that every NIC beside a GPU is up and listed in NCCL_IB_HCA, drop a stale NCCL_TOPO_FILE, leave NCCL_CROSS_NIC at its default; rerun and compare `ncclprobe topo --from <graph dump>` rails.",
        source: "NCCL src/graph/search.cc (channel NIC choice), NCCL_CROSS_NIC and NCCL_IB_HCA in NCCL's environment variables",
        check: fallback::rail_across_socket,
    },
    Rule {
        id: "net.port-below-peers",
        severity: Severity::Warning,
        explanation: "An RDMA port runs at half the rate of its peers or less, or is not ACTIVE: a link that trained down (a bad cable or transceiver, a switch port set to a lower speed) or lost its link. NCCL spreads channels evenly over the rails, so the slowest port sets the pace of every collective that crosses it.",
        fix: "`ibstat` / `ibstatus` on the node, `mlxlink -d <dev> -m` for the cable and the negotiated speed, reseat or replace the cable, and check the switch port's speed; keep the node out of the pool until every port runs at its rate.",
        source: "Linux sysfs /sys/class/infiniband/<dev>/ports/<n>/{rate,state,phys_state}; NCCL src/graph/topo.cc (net speed); published cluster report of downtrained links halving all-reduce",
        check: fallback::port_below_peers,
    },
    Rule {
        id: "net.ib-hca-mismatch",
        severity: Severity::Error,
        explanation: "NCCL_IB_HCA decides which RDMA ports NCCL uses. A name that matches no port is silently ignored (and NCCL may fall back to sockets if nothing is left); an Ethernet (RoCE) port among InfiniBand rails, often the node's front-end or storage NIC, gets its share of channels and slows every collective to its rate. Lists copied from another node type go stale this way.",
        fix: "List exactly the compute rails (`NCCL_IB_HCA==mlx5_0:1,mlx5_1:1,...`, `=` for exact names), from `ibv_devinfo` / `ibdev2netdev` on this node type; or exclude the front-end port (`NCCL_IB_HCA=^mlx5_bond_0`).",
        source: "NCCL environment variables: NCCL_IB_HCA (prefix matching, ^ and =); published cluster report tracing a 2x loss to a stale HCA list",
        check: fallback::ib_hca_mismatch,
    },
    Rule {
        id: "collnet.unused",
        severity: Severity::Warning,
        explanation: "NCCL_COLLNET_ENABLE=1 asks for in-network reductions (SHARP) but NCCL built no CollNet channel: the SHARP plugin (libnccl-net with coll support) is not loaded, the fabric has no aggregation manager, or the job's layout does not fit CollNet. The run silently uses ring/tree instead.",
        fix: "Check for `Loaded coll plugin SHARP` in NCCL_DEBUG=INFO output, the HPC-X / nccl-rdma-sharp-plugins install, and the SHARP aggregation manager; or drop NCCL_COLLNET_ENABLE if SHARP is not part of this fabric.",
        source: "NCCL environment variables: NCCL_COLLNET_ENABLE; NCCL src/transport/coll_net.cc; Mellanox/nccl-rdma-sharp-plugins",
        check: fallback::collnet_unused,
    },
    Rule {
        id: "topo.nic-far-from-gpu",
        severity: Severity::Info,
        explanation: "NCCL reads and writes GPU memory directly from the NIC (GPUDirect RDMA) only when the NIC is close to the GPU (NCCL_NET_GDR_LEVEL defaults to PXB); for these GPUs inter-node traffic is staged through host memory, costing bandwidth and CPU.",
        fix: "For multi-node jobs, prefer GPUs with a PIX/PXB NIC, or raise NCCL_NET_GDR_LEVEL (e.g. PHB) after checking with a sweep that it helps; confirm in NCCL_DEBUG=INFO logs (`via NET/IB/…/GDRDMA`).",
        source: "NCCL environment variables: NCCL_NET_GDR_LEVEL, https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html; NCCL src/graph/paths.cc (ncclTopoCheckGdr), https://github.com/NVIDIA/nccl/blob/master/src/graph/paths.cc",
        check: links::nic_far_from_gpu,
    },
    Rule {
        id: "topo.cross-numa",
        severity: Severity::Warning,
        explanation: "Traffic between these GPUs crosses QPI/UPI/Infinity Fabric; NCCL disables P2P across it on most CPUs and bandwidth is bounded by the inter-socket link (NCCL models 6-40 GB/s).",
        fix: "Place communicating ranks on GPUs of one NUMA node (CUDA_VISIBLE_DEVICES), bind processes to the GPU's NUMA node (numactl), and expect lower busbw for jobs spanning sockets.",
        source: "NCCL SYS bandwidth constants, https://github.com/NVIDIA/nccl/blob/master/src/graph/topo.h; P2P cut-off, https://github.com/NVIDIA/nccl/blob/master/src/graph/paths.cc (ncclTopoCheckP2p)",
        check: links::cross_numa,
    },
    Rule {
        id: "pcie.downgraded",
        severity: Severity::Info,
        explanation: "A narrower link (fewer lanes) caps every transfer to and from the GPU; a lower speed at idle is normal power saving, under load it means a bad riser, slot or BIOS setting.",
        fix: "Re-seat the card or riser, check the slot's lane wiring and BIOS PCIe settings; compare with `nvidia-smi -q -d PCI` under load.",
        source: "DCGM diag PCIe checks (min_pci_generation, min_pci_width), https://docs.nvidia.com/datacenter/dcgm/latest/reference/diagnostics/plugins/pcie.html",
        check: links::pcie_downgraded,
    },
    Rule {
        id: "pcie.acs-enabled",
        severity: Severity::Warning,
        explanation: "With Access Control Services redirecting peer-to-peer requests on the bridges between GPUs, P2P that should stay inside a PCIe switch goes up to the root complex (and through the IOMMU): bandwidth drops, and NCCL can hang or report errors on P2P.",
        fix: "On bare metal disable ACS on the switch ports (BIOS setting, or `setpci -s <bridge> ECAP_ACS+0x6.w=0000` for each bridge listed, re-applied at every boot); in VMs keep ACS and expect no P2P between these GPUs.",
        source: "NCCL user guide, troubleshooting: PCI Access Control Services (ACS), https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html#pci-access-control-services-acs; https://github.com/NVIDIA/nccl/issues/1086",
        check: links::acs_enabled,
    },
    Rule {
        id: "pcie.iommu-translated",
        severity: Severity::Warning,
        explanation: "With the IOMMU translating, GPU peer-to-peer traffic is redirected through the root complex (or blocked with ACS on the switches): P2P through PCIe switches gets slow or hangs, and users report all-reduce bandwidth recovering only after IOMMU passthrough or off.",
        fix: "Boot with iommu=pt (intel_iommu=on iommu=pt, or amd_iommu=on iommu=pt) or disable the IOMMU in the BIOS on bare metal, and disable ACS on the PCIe switches; then re-run ncclprobe sweep.",
        source: "NCCL user guide, troubleshooting: PCI Access Control Services (ACS) and IOMMU, https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html#pci-access-control-services-acs; https://github.com/NVIDIA/nccl/issues/841, https://github.com/NVIDIA/nccl/issues/1285, https://github.com/NVIDIA/nccl/issues/1086",
        check: links::iommu_translated,
    },
    Rule {
        id: "devshm.small",
        severity: Severity::Warning,
        explanation: "NCCL's SHM transport and PyTorch's DataLoader workers allocate in /dev/shm; Docker's default 64 MB makes NCCL fail creating segments or forces users to disable SHM.",
        fix: "Run the container with --shm-size=8g (or --ipc=host); on Kubernetes mount an emptyDir with medium: Memory at /dev/shm.",
        source: "https://github.com/NVIDIA/nccl/issues/342, https://github.com/NVIDIA/nccl/issues/1518",
        check: host::devshm_small,
    },
    Rule {
        id: "devshm.failure",
        severity: Severity::Error,
        explanation: "/dev/shm is too small or not shared between the ranks' containers.",
        fix: "Enlarge /dev/shm (docker --shm-size=8g / --ipc=host); do not paper over it with NCCL_SHM_DISABLE=1, which drops intra-node traffic to sockets.",
        source: "https://github.com/NVIDIA/nccl/issues/342, https://github.com/NVIDIA/nccl/issues/525, https://github.com/NVIDIA/nccl/issues/1518, https://github.com/microsoft/WSL/issues/12467",
        check: host::devshm_failure,
    },
    Rule {
        id: "loader.oversubscribed",
        severity: Severity::Warning,
        explanation: "Each DataLoader worker is a process of its own, and every rank on the node starts num_workers of them. With more workers than CPUs they contend for cores (and for memory: each forked worker touches its copy-on-write copy of the dataset, so pages get copied per worker), context switches replace work, and loading gets slower instead of faster; PyTorch warns that the loader may even freeze. It checks one loader against the CPUs the process may use, not the ranks sharing the node.",
        fix: "Set num_workers to at most the CPUs divided by the ranks on the node (the title says how many fit), and start lower (4-8 per GPU is common) raising it while GPU utilisation rises; leave a CPU per rank for the training process itself. In containers count the CPUs the job may use (nproc), not the machine's.",
        source: "PyTorch torch/utils/data/dataloader.py check_worker_number_rationality (suggested max = len(os.sched_getaffinity(0))); PyTorch data docs, multi-process data loading; a user report: num_workers=40 on a 20-core machine, the GPU at 3%",
        check: loader::oversubscribed,
    },
    Rule {
        id: "loader.starved",
        severity: Severity::Warning,
        explanation: "A GPU that runs a training process but computes less than half the time, with memory to spare, waits for something; with the host short of memory, a loader over its CPU budget, or loading in the training process (num_workers 0), it waits for data: each step starts only when the next batch arrives. nvidia-smi's utilisation is the share of time any kernel ran over the last sample period, so one snapshot can catch a gap; several (dmon, watch) are surer.",
        fix: "Feed it faster: num_workers > 0 up to the CPU budget (CPUs / ranks per node), pin_memory=True so host-to-device copies overlap compute, persistent_workers=True so workers are not forked again every epoch (drop it when host memory is short), prefetch_factor 2-4; with memory to spare raise the per-GPU batch and lower gradient accumulation to keep the effective batch. Time one pass over the DataLoader alone to see the loader's own rate.",
        source: "PyTorch performance tuning guide (asynchronous data loading, pin_memory); PyTorch DataLoader docs; nvidia-smi utilization.gpu definition; user reports: host RAM at 94% with swap in use while the GPUs used half their memory (num_workers=0, no pin_memory), and num_workers=40 on a 20-core machine, the GPU at 3%",
        check: loader::starved,
    },
    Rule {
        id: "gpu.out-of-memory",
        severity: Severity::Error,
        explanation: "PyTorch could not allocate a tensor: the weights, gradients, optimizer states and activations of this step (and the caching allocator's reserve) do not fit the GPU. The step's peak is usually in the forward activations or the optimizer's first step; memory reserved but unallocated is fragmentation.",
        fix: "Hold your setup (model, batch, sequence, precision, ZeRO stage) against this error with `ncclprobe simulate memory ... --oom FILE`: it says which tensor failed, how far the step's peak lies beyond it and which change fits; then pull the usual levers: a smaller micro-batch with gradient accumulation, activation checkpointing, ZeRO-3/FSDP full sharding or CPU offload, LoRA instead of full fine-tuning; with much reserved but unallocated, PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.",
        source: "PyTorch c10/cuda/CUDACachingAllocator.cpp out-of-memory message (1.x and 2.x formats); PyTorch CUDA semantics docs, memory management (expandable_segments)",
        check: loader::gpu_out_of_memory,
    },
    Rule {
        id: "host.memory-pressure",
        severity: Severity::Warning,
        explanation: "The host's RAM is nearly all held by programs (page cache excluded) or it swaps while RAM is full: the kernel reclaims and swaps pages, DataLoader workers and the training process stall on page faults, pinned-memory allocations can fail, and the out-of-memory killer may end a rank. Every DataLoader worker adds its own copy of what it touches of the dataset.",
        fix: "Lower num_workers (each worker duplicates the dataset pages it touches) or share the dataset through numpy arrays or memory-mapped files instead of Python objects; drop persistent_workers; load the dataset lazily; add RAM or move other jobs off the host. Watch `free -h` and `vmstat 1` (si/so columns) while training.",
        source: "procps free(1) (available column); PyTorch DataLoader docs, multi-process data loading (copy-on-access, https://github.com/pytorch/pytorch/issues/13246); a user report: host RAM at 94% with swap in use while the GPUs used half their memory (num_workers=0, no pin_memory)",
        check: loader::memory_pressure,
    },
    Rule {
        id: "ib.memlock",
        severity: Severity::Error,
        explanation: "NCCL's InfiniBand/RoCE transport pins its buffers so the NIC can reach them (ibv_reg_mr). Pinned pages count against the process's locked-memory limit; containers and fresh logins often keep the 64 KiB or 8 MiB default, and registration then fails with 'Cannot allocate memory'. The limit that counts is the one inside the launched process, not the login shell's.",
        fix: "Raise the limit where the ranks start: 'ulimit -l unlimited' (memlock unlimited in /etc/security/limits.conf, then log in again), docker run --ulimit memlock=-1:-1, or the container runtime's default ulimits on Kubernetes. Check what the ranks see with: mpirun <same args> bash -c 'ulimit -l'.",
        source: "NCCL troubleshooting, InfiniBand section; https://github.com/NVIDIA/nccl-tests/issues/206 (ulimit -l was 8192 inside the job)",
        check: causes::ib_memlock,
    },
    Rule {
        id: "gpu.duplicate",
        severity: Severity::Error,
        explanation: "Two ranks of one communicator opened the same GPU, so NCCL stopped at init (ncclInvalidUsage). Every process started on the default device: the script never chose one per rank, or CUDA_VISIBLE_DEVICES gives each process the same GPU.",
        fix: "Choose the device from the local rank before any CUDA work: torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) (or device_ids=[local_rank] in DDP), and do not give every process the same CUDA_VISIBLE_DEVICES. One rank per GPU.",
        source: "NCCL init.cc 'Duplicate GPU detected'; PyTorch DDP docs (one process per GPU)",
        check: causes::duplicate_gpus,
    },
    Rule {
        id: "bootstrap.no-interface",
        severity: Severity::Error,
        explanation: "NCCL opens its bootstrap (and the socket transport) on a network interface that is up and has an address. It skips lo and docker* unless told, and NCCL_SOCKET_IFNAME restricts it to names with the given prefixes. When nothing is left, init fails before any GPU work.",
        fix: "See the interfaces with 'ip -br addr' on every host and set NCCL_SOCKET_IFNAME to the one that carries the hosts' addresses (a prefix, '=name' for an exact name, '^name' to exclude). On a single host, NCCL_SOCKET_IFNAME=lo works.",
        source: "NCCL bootstrap.cc 'no socket interface found'; NCCL env docs, NCCL_SOCKET_IFNAME",
        check: causes::no_interface,
    },
    Rule {
        id: "ib.completion-error",
        severity: Severity::Error,
        explanation: "A send or receive over InfiniBand/RoCE completed with an error. 'Transport retry counter exceeded' (12) means the NIC retried and never got an acknowledgement. The usual causes: a link or switch port dropping packets, RoCE without lossless flow control, an MTU mismatch, the wrong GID index, or a peer that died. 'Work request flushed' (5) is a consequence of an earlier failure on the same connection.",
        fix: "On both hosts, check the port state and error counters (ibstat, ibv_devinfo, 'perfquery -x' or the switch), then test the pair alone with ib_write_bw. On RoCE, check NCCL_IB_GID_INDEX, PFC/ECN and matching MTUs. NCCL_IB_TIMEOUT (e.g. 22) helps on long or congested fabrics.",
        source: "NCCL net_ib.cc 'Got completion from peer'; libibverbs ibv_wc_status_str; NCCL troubleshooting, InfiniBand/RoCE",
        check: causes::ib_completion_error,
    },
    Rule {
        id: "cuda.out-of-memory",
        severity: Severity::Error,
        explanation: "NCCL allocates GPU memory at init and the first time it uses each algorithm or peer: channel buffers (NCCL_BUFFSIZE per channel and peer), NVLS buffers, and the memory registered for P2P. A model that already fills the GPU leaves no room, so the collective fails on the CUDA allocation.",
        fix: "Leave headroom: a smaller batch, or a cap on the framework's allocator. Create the process group (and run a first all-reduce) before loading the model. NCCL_NVLS_ENABLE=0 and a smaller NCCL_BUFFSIZE shrink NCCL's share.",
        source: "NCCL CUDACHECK 'Cuda failure ... out of memory'; NCCL env docs (NCCL_BUFFSIZE, NCCL_NVLS_ENABLE)",
        check: causes::out_of_memory,
    },
    Rule {
        id: "nccl.remote-error",
        severity: Severity::Error,
        explanation: "ncclRemoteError means a peer stopped answering: its process exited (an exception, an OOM kill, a crash) or the network between the two dropped. Every surviving rank then reports it, and the messages look like a network fault even when one rank simply died. The cause is in the rank that failed first, not in the ranks that report this.",
        fix: "Find the first rank to fail: its own log (exception, 'Killed', CUDA error), dmesg for the OOM killer on its host, the launcher's exit codes. If every process was alive, check the link between the hosts named in the lines (and any NET/IB completion errors).",
        source: "NCCL ncclGetErrorString (ncclRemoteError); NCCL socket.cc warnings",
        check: causes::remote_error,
    },
    Rule {
        id: "nccl.versions-differ",
        severity: Severity::Error,
        explanation: "Every rank of a job must run the same NCCL: the bootstrap and proxy exchange structures whose layout changes between releases, so ranks on different builds fail with internal errors, truncated messages or hangs. Which release a host runs shows in the messages it prints: each message exists in a known range of releases (the catalogue read them off NCCL's source), and these hosts printed messages no single release prints together.",
        fix: "Make every node load the same libnccl.so.2: check `NCCL version` on each rank (NCCL_DEBUG=VERSION), the NCCL a Python environment brings (pip's nvidia-nccl-cu*, conda's nccl) against LD_LIBRARY_PATH and the container image, and rebuild or re-pull the images that differ.",
        source: "data/messages/nccl.json (each message's releases, from NCCL's source v2.18-v2.30); NCCL troubleshooting, https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html",
        check: consistency::versions_differ,
    },
    Rule {
        id: "nccl.ranks-differ",
        severity: Severity::Warning,
        explanation: "Ranks of one job should make the same choices: the same network and plugin, the same NCCL_* settings. When they differ, the environment did not reach every rank (mpirun without -x, a launcher that passes only some variables, a per-node profile), or the nodes differ (a plugin installed on some, another container image); ranks that chose differently cannot connect, or the job runs at the slower node's speed.",
        fix: "Set NCCL_* variables for every rank (mpirun -x NAME, srun --export, the pod spec of every worker), install the same plugins on every node, and check that each rank's log shows the same `Using network` line and the same variables.",
        source: "NCCL environment variables, https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html; Open MPI mpirun -x; the lines each host printed (data/messages/causes.toml notes with a fact)",
        check: consistency::choices_differ,
    },
    Rule {
        id: "nccl.choices",
        severity: Severity::Info,
        explanation: "The log reports no problem, so what it shows is what NCCL chose: a network (IB, a plugin, or Socket), per-channel transports (P2P and NVLS inside a node, NET/IB with GDRDMA across nodes when the NICs can reach GPU memory), the channel counts, the tuner's algorithm and protocol per size. Slow collectives with no error usually show here: sockets where RDMA exists, SHM where P2P should be, GPUDirect RDMA off, few channels, NVLS unavailable on an NVSwitch system.",
        fix: "Hold the choices against the hardware: `ncclprobe compare RUN --log LOG` for what that path should give; the other findings name what would change them (transport.*, net.*, env.*).",
        source: "NCCL_DEBUG=INFO lines (init.cc `Using network`, channel lines of transport/*.cc, `NVLS multicast support`, the tuner's lines of enqueue.cc 2.23+)",
        check: consistency::choices,
    },
    Rule {
        id: "nccl.catalogue",
        severity: Severity::Error,
        explanation: "A message the catalogue of NCCL's (and its neighbours') messages knows: each finding carries the id, explanation, fix and source of the message's class or of the note on it.",
        fix: "As the finding says; `ncclprobe diagnose --explain LINE` prints the catalogue's entry for one line, and `ncclprobe messages` lists them all.",
        source: "data/messages/*.json (generated from the projects' source by ci/messages/generate) and data/messages/causes*.toml",
        check: messages::explained,
    },
    Rule {
        id: "nccl.error",
        severity: Severity::Error,
        explanation: "'unhandled system error' is usually the environment (missing libnvidia-ml/libibverbs, /sys paths absent in containers or WSL, sockets refused); 'unhandled cuda error' a driver/device problem (busy or exclusive-process GPUs, illegal memory access); NCCL WARN lines just before the error name the cause.",
        fix: "Read the first NCCL WARN line; rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,GRAPH for the failing rank.",
        source: "NCCL troubleshooting guide, https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html",
        check: host::nccl_error,
    },
    Rule {
        id: "watchdog.timeout",
        severity: Severity::Error,
        explanation: "The collective started on some ranks and never completed. Ranks that did not report are usually the culprits (crashed, stuck in data loading or in a different collective); if every rank reported, NCCL itself is hung (network, P2P, or mismatched collectives).",
        fix: "Find what the silent ranks were doing (py-spy dump, their logs); set TORCH_NCCL_ASYNC_ERROR_HANDLING=1 and NCCL_DEBUG=INFO; check that every rank calls the same collectives in the same order.",
        source: "PyTorch ProcessGroupNCCL watchdog, https://github.com/pytorch/pytorch/blob/main/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp; finding the hung rank, https://github.com/NVIDIA/nccl/issues/1324",
        check: host::watchdog_timeout,
    },
    Rule {
        id: "run.incomplete",
        severity: Severity::Error,
        explanation: "The run did not measure every size it was asked for: it failed, timed out, was killed (its record still says `running`) or was interrupted. The figures it has stop where it stopped, and the reason it stopped (the record's error) comes before anything they show.",
        fix: "Read the record's error and the last size measured; a timeout or a failure at one size points at that size's transfer (rerun with NCCL_DEBUG=INFO and --timeout), a killed run at the launcher or the out-of-memory killer (dmesg). Rerun to completion before judging the figures.",
        source: "the record's status and error (ncclprobe sweep; README, exit codes)",
        check: results::incomplete,
    },
    Rule {
        id: "result.wrong",
        severity: Severity::Error,
        explanation: "nccl-tests compares every element with its exact expected value; wrong elements mean corruption (hardware, driver, a bad link) or a bug, never noise.",
        fix: "Rerun with -c 10 to see whether it is intermittent; isolate GPUs/links pairwise; check dmesg for Xid errors and PCIe AER.",
        source: "nccl-tests bit-exact verification, https://github.com/NVIDIA/nccl-tests/blob/master/verifiable/verifiable.cu; what #wrong means, https://github.com/NVIDIA/nccl-tests/issues/176",
        check: results::wrong,
    },
    Rule {
        id: "result.truncated",
        severity: Severity::Warning,
        explanation: "The table has no footer: the run crashed, was killed, hung, or the paste was cut. The rows before the cut are kept.",
        fix: "Look at the errors after the last row; rerun with --timeout so a hang ends with a message.",
        source: "nccl-tests output format, https://github.com/NVIDIA/nccl-tests/blob/master/src/util.cu",
        check: results::truncated,
    },
    Rule {
        id: "result.below-expected",
        severity: Severity::Warning,
        explanation: "NCCL estimated these calls (ncclGroupSimulateEnd) from the topology it detected; measuring more than 1.5x its estimate at the largest size means something outside its model slows them: other traffic on the GPUs or links, thermal or power throttling, a link running below its speed, ACS/IOMMU redirecting P2P, or a slow rank.",
        fix: "Rerun on an idle machine; check pcie.downgraded, nvlink.down and pcie.iommu-translated (ncclprobe diagnose), clocks and throttle reasons (nvidia-smi -q -d PERFORMANCE), and the per-rank times in the record for a straggler.",
        source: "NCCL ncclGroupSimulateEnd (NCCL 2.22+), recorded per point as nccl_model_time_s",
        check: results::slower_than_nccl_model,
    },
    Rule {
        id: "result.below-expected",
        severity: Severity::Warning,
        explanation: "ncclprobe's expectation for the path the facts say NCCL takes (topology, GPU model, NCCL_* overrides, WSL2, the log's transports: the one `ncclprobe compare` prints) is at least twice what was measured at the plateau: something outside that path slows it: a PCIe link trained down, ACS/IOMMU redirecting P2P, a container's small /dev/shm or CPU limits, a busy GPU, or traffic on a shared link.",
        fix: "Run `ncclprobe compare RUN --topo topo.txt` for the per-size picture and the chosen expectation; check pcie.downgraded, pcie.iommu-translated and devshm.small (ncclprobe diagnose), and rerun on an idle machine.",
        source: "data/expectations.toml (ncclprobe baselines) and NCCL's cost model, https://github.com/NVIDIA/nccl/blob/master/src/graph/tuning.cc",
        check: results::below_expectation,
    },
    Rule {
        id: "result.straggler",
        severity: Severity::Warning,
        explanation: "One rank entered the collectives last in most calls, well after the others, who waited for it inside the call: the collective's time is that rank's lateness plus the transfer. Its cause is outside the link: a slower or throttled GPU, a busy or descheduled CPU (other processes, too few cores, a missing CPU binding), a data loader or host-side work before the call, or a rank on a slower node.",
        fix: "Look at what that rank does between collectives and where it runs: nvidia-smi -q -d PERFORMANCE,CLOCK for its GPU, top/htop for its CPU, bind ranks to cores near their GPU (mpirun --bind-to numa, numactl), and rerun sweep --stragglers to see whether the same rank stays late.",
        source: "sweep --stragglers: per-rank entry and exit times on a common clock (isolating a slow rank: https://github.com/NVIDIA/nccl/issues/349)",
        check: results::straggler,
    },
    Rule {
        id: "matrix.slow-pair",
        severity: Severity::Warning,
        explanation: "Pairs measured alone (or in rounds of disjoint pairs, then again alone) should be alike when they cross alike links; one far below the median pair points at that pair's path: a degraded NVLink, a PCIe slot trained at fewer lanes or a lower generation, a bridge or switch in the way (the link class is named when the GPU link matrix is known), or a GPU whose every pair is slow.",
        fix: "Check the two GPUs' links: nvidia-smi nvlink --status, nvidia-smi -q -d PCIE (current vs max width and generation), nvidia-smi topo -m; reseat or move the card; run ncclprobe diagnose for pcie.downgraded and nvlink.down.",
        source: "ncclprobe matrix (per-pair tests: https://github.com/NVIDIA/nccl-tests/issues/106, https://github.com/NVIDIA/nccl-tests/issues/178)",
        check: matrix::slow_pair,
    },
    Rule {
        id: "matrix.slow-node",
        severity: Severity::Warning,
        explanation: "Pairs of nodes, all ranks of one sending to the other's at once, should be alike on a uniform fabric; a node whose every pair is slow has a bad NIC, cable, switch port or PCIe path to its NIC, and a single slow node pair points at the path between those two.",
        fix: "On the node named: ibstat / ethtool for link rate and errors, the NIC's PCIe width (lspci -vv), its switch port's counters; compare NCCL_DEBUG=INFO lines for the transport chosen; drain the node and rerun the matrix.",
        source: "ncclprobe matrix --by node (pairwise node tests: https://github.com/NVIDIA/nccl-tests/issues/106)",
        check: matrix::slow_node,
    },
];

/// Run every rule; findings sorted by severity (worst first), then id.
pub fn run(inputs: &Inputs) -> Vec<Finding> {
    let raised: Vec<(Option<String>, Finding)> = RULES
        .iter()
        .chain(trace::RULES)
        .flat_map(|rule| {
            (rule.check)(inputs).into_iter().map(|hit| {
                let (id, explanation, fix, source) = match hit.text {
                    Some(t) => (t.id, t.explanation, t.fix, t.source),
                    None => (
                        rule.id.into(),
                        rule.explanation.into(),
                        rule.fix.into(),
                        rule.source.into(),
                    ),
                };
                let finding = Finding {
                    id,
                    severity: hit.severity.unwrap_or(rule.severity),
                    title: hit.title,
                    evidence: hit.evidence,
                    explanation,
                    fix,
                    source,
                };
                (hit.unless, finding)
            })
        })
        .collect();
    let ids: std::collections::BTreeSet<String> =
        raised.iter().map(|(_, f)| f.id.clone()).collect();
    let mut out: Vec<Finding> = raised
        .into_iter()
        // `*`: only when nothing else is raised (a summary of a log with nothing to say).
        .filter(|(unless, _)| {
            unless
                .as_ref()
                .is_none_or(|u| !ids.contains(u) && (u != "*" || ids.len() == 1))
        })
        .map(|(_, f)| f)
        .collect();
    out.sort_by(|a, b| b.severity.cmp(&a.severity).then(a.id.cmp(&b.id)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_has_its_text_and_ids_look_alike() {
        for rule in RULES {
            assert!(
                rule.id.contains('.') || rule.id == "wsl2",
                "{}: ids are area.what",
                rule.id
            );
            for (what, text, least) in [
                ("explanation", rule.explanation, 40),
                ("fix", rule.fix, 40),
                ("source", rule.source, 8),
            ] {
                assert!(text.len() >= least, "{}: {what} too short", rule.id);
            }
        }
        // Only result.below-expected has two rows (NCCL's model and the topology's).
        let mut ids: Vec<&str> = RULES.iter().map(|r| r.id).collect();
        ids.sort();
        let before = ids.len();
        ids.dedup();
        assert_eq!(before - ids.len(), 1);
    }

    #[test]
    fn nothing_to_look_at_finds_nothing() {
        assert!(run(&Inputs::default()).is_empty());
    }
}
