"""RCCL (ROCm's NCCL): the same WARN/INFO macros and ncclGetErrorString as NCCL, in its own
source. Tags: the ROCm releases from 6.0 on that the repository carries (later releases moved
RCCL into ROCm's monorepo)."""

import re

CONFIG = {
    "url": "https://github.com/ROCm/rccl",
    "tags": lambda t: re.fullmatch(r"rocm-6\.[0-9]+\.[0-9]+", t) is not None,
    "trees": ["src/"],
    "macros": {
        "WARN": ("WARN", 0, None),
        "INFO": ("INFO", 1, 0),
        "INFO_LOC": ("INFO", 1, 0),
    },
    "result_strings": "ncclGetErrorString",
}
