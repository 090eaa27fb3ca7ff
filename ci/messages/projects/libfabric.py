"""libfabric (ofiwg): the core (src/: fi_getinfo, hmem/CUDA, the fi_strerror texts) and the EFA
provider (prov/efa/src), which aws-ofi-nccl drives on AWS. libfabric prints
`libfabric:PID:TIME:PREFIX:PROV:SUBSYS:FUNC():LINE<LEVEL> <text>` (src/log.c, ofi_log); the
stored format is <text>. Read are FI_WARN / FI_WARN_ONCE / FI_WARN_SPARSE (warn), FI_INFO (info,
printed at FI_LOG_LEVEL=info), the EFA wrappers of both (prov/efa/src/efa_prov.h, the ERRNO ones
paste `": %s(%d)"` after their literal), and as RESULT entries the texts fi_strerror gives the
FI_E* codes (src/fabric.c errstr[]) and efa_strerror the EFA completion and provider codes
(prov/efa/src/efa_errno.h). Tags: the newest release and the newest 1.x (still the one many
EFA installers ship)."""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402

SPECS = {
    "FI_WARN": {"level": "WARN", "fmt": 2, "flags": 1},
    "FI_WARN_ONCE": {"level": "WARN", "fmt": 2, "flags": 1},
    "FI_WARN_SPARSE": {"level": "WARN", "fmt": 2, "flags": 1},
    "FI_INFO": {"level": "INFO", "fmt": 2, "flags": 1},
    "EFA_WARN": {"level": "WARN", "fmt": 1, "flags": 0},
    "EFA_WARN_ONCE": {"level": "WARN", "fmt": 1, "flags": 0},
    "EFA_WARN_ERRNO": {"level": "WARN", "fmt": 1, "flags": 0, "suffix": ": %s(%d)"},
    "EFA_WARN_FI_ERRNO": {"level": "WARN", "fmt": 1, "flags": 0, "suffix": ": %s(%d)"},
    "EFA_INFO": {"level": "INFO", "fmt": 1, "flags": 0},
    "EFA_INFO_ERRNO": {"level": "INFO", "fmt": 1, "flags": 0, "suffix": ": %s(%d)"},
}
RETURNS = r"(?:return|ret\s*=|err\s*=)\s*\(?\s*(-?FI_E[A-Z0-9_]+|FI_EFA_ERR_\w+)"
ERRSTR = re.compile(r'\[\s*(FI_E\w+)\s*-\s*FI_ERRNO_OFFSET\s*\]\s*=\s*"((?:[^"\\]|\\.)*)"')
EFA_ROW = re.compile(r"^\s*_\(\s*(\d+),\s*(\w+),\s*(.*?)\)\s*\\?\s*$")


def result(path, line, fmt, code, function):
    return {"level": "RESULT", "format": fmt, "subsys": [], "file": path, "line": line,
            "function": function, "guard": "case " + code, "returns": code}


def scan(text, path):
    if path == "src/fabric.c":
        for m in ERRSTR.finditer(text):
            yield result(path, text.count("\n", 0, m.start()) + 1, m.group(2), m.group(1),
                         "fi_strerror")
    if path.endswith("efa_errno.h"):
        table = None
        for i, line in enumerate(text.split("\n")):
            if "define EFA_IO_COMP_STATUSES" in line:
                table = "EFA_IO_COMP_STATUS_"
            elif "define EFA_PROV_ERRNOS" in line:
                table = "FI_EFA_ERR_"
            m = EFA_ROW.match(line)
            if table and m and m.group(2) != "OK":
                yield result(path, i + 1, m.group(3).strip(), table + m.group(2), "efa_strerror")
    if path.endswith((".c", ".h")):
        yield from _common.c_calls(generate, text, path, SPECS,  # noqa: F821
                                   subsys_re=r"FI_LOG_(\w+)", returns_re=RETURNS)


CONFIG = {
    "url": "https://github.com/ofiwg/libfabric",
    "tags": lambda t: t in ("v1.22.0", "v2.6.0"),
    "trees": ["src/", "prov/efa/src/"],
    "macros": {},
    "scan": scan,
}
