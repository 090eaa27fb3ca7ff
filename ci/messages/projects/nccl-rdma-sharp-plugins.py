"""nccl-rdma-sharp-plugins (Mellanox): the SHARP CollNet plugin and the IB/UCX net plugins
HPC-X ships as libnccl-net.so. It logs through NCCL's logger with NCCL's own WARN/INFO macros,
so its lines look like NCCL's (`sharp_plugin.c:354 NCCL WARN ...`)."""

import re

CONFIG = {
    "url": "https://github.com/Mellanox/nccl-rdma-sharp-plugins",
    "tags": lambda t: re.fullmatch(r"v2\.\d+\.\d+", t) is not None,
    # The last tag (v2.1.0) is years old: the newest code is on master.
    "extra_refs": ["master"],
    "trees": ["src/", "include/"],
    "macros": {
        "WARN": ("WARN", 0, None),
        "INFO": ("INFO", 1, 0),
    },
}
