"""nccl-tests (NVIDIA/nccl-tests): what its binaries print besides the table — failures of the
NCCL or CUDA calls they make (common.h's NCCLCHECK/CUDACHECK/TESTCHECK), timeouts, refused
arguments. Its printf/fprintf/PRINT calls are read; those whose text names a failure are
errors, the rest context."""

import re
import __main__ as generate

MACROS = {
    "printf": ("INFO", 0, None),
    "fprintf": ("INFO", 1, None),
    "PRINT": ("INFO", 0, None),
}
FAILURE = re.compile(r"fail|error|invalid|timeout|abort|corrupt|mismatch|not supported|unable", re.I)


def scan(text, path):
    for call in generate.scan(text, path, MACROS):
        fmt = call["format"].strip()
        # Table rows and headers (`%12li ...`) and blank separators are the table's, not messages.
        if not fmt or fmt.startswith("#") and not FAILURE.search(fmt):
            continue
        call["format"] = fmt
        call["level"] = "ERROR" if FAILURE.search(fmt) else "INFO"
        yield call


CONFIG = {
    "url": "https://github.com/NVIDIA/nccl-tests",
    "tags": lambda t: re.fullmatch(r"v2\.(1[3-9]|[2-9]\d)\.\d+", t) is not None,
    "trees": ["src/"],
    "scan": scan,
}
