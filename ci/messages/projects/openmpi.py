"""Open MPI: what ends a job at launch or MPI_Init before NCCL starts. Read are
  - the show_help files (`help-*.txt`) of ompi/, opal/ and (v4.1) orte/: each `[topic]`'s first
    paragraph, as show_help prints it between two dashed lines (_common.help_topics);
  - the C messages printed whatever the verbosity, in the components that matter to a GPU job:
    pml ucx and common ucx (`pml_ucx.c:NNN  Error: ...`), btl tcp/openib/uct/smcuda (BTL_ERROR,
    printed as `[host][[job,vpid],rank][file:line:func] text`), mtl ofi, the MPI error handler
    (`*** An error occurred in MPI_Init`), ORTE's error log, daemons and show_help's aggregation
    line, each an opal_output(0, ...) (stream 0 is stderr; other streams are verbose-only).
Tags: the newest 4.1 (the last with ORTE, still common on clusters) and the newest 5.0 release;
5.0's launcher is PRRTE (project `prrte`), its PMIx is project `pmix`."""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402

C_DIRS = ("ompi/mca/pml/ucx/", "opal/mca/common/ucx/", "opal/mca/btl/tcp/", "opal/mca/btl/openib/",
          "opal/mca/btl/uct/", "opal/mca/btl/smcuda/", "opal/mca/btl/base/", "ompi/mca/mtl/ofi/",
          "opal/mca/common/ofi/", "opal/mca/common/cuda/", "ompi/errhandler/", "ompi/runtime/",
          "opal/util/show_help.c", "orte/util/show_help.c", "orte/mca/errmgr/",
          "orte/mca/plm/", "orte/mca/oob/tcp/", "orte/mca/ess/base/", "orte/mca/state/base/",
          "orte/orted/", "orte/tools/orterun/")
# Embedded third-party copies (PMIx 3 in opal/mca/pmix/pmix3x/pmix, hwloc, libevent) are not
# Open MPI's own texts.
SKIP = re.compile(r"^opal/mca/(pmix/pmix3x/pmix|hwloc/hwloc\d+/hwloc|event/libevent\d+/libevent)/|"
                  r"/(tools/opal-(checkpoint|restart)|crs|sstore|snapc)/")

STREAM0 = lambda args: args[0] == "0"  # noqa: E731
SPECS = {
    "MCA_COMMON_UCX_ERROR": {"level": "ERROR", "fmt": 0, "prefix": "Error: "},
    "MCA_COMMON_UCX_WARN": {"level": "WARN", "fmt": 0, "prefix": "Warning: "},
    "PML_UCX_ERROR": {"level": "ERROR", "fmt": 0, "prefix": "Error: "},
    "PML_UCX_WARN": {"level": "WARN", "fmt": 0, "prefix": "Warning: "},
    "BTL_ERROR": {"level": "ERROR", "fmt": 0, "inner": 0},
    "BTL_PEER_ERROR": {"level": "ERROR", "fmt": 0, "inner": 1},
    "opal_output": {"level": "ERROR", "fmt": 1, "when": STREAM0},
    "out": {"level": "ERROR", "fmt": 0},
}
RETURNS = r"(?:return|rc\s*=|ret\s*=)\s*\(?\s*((?:OMPI|OPAL|ORTE)_ERR_\w+|OMPI_ERROR|OPAL_ERROR|ORTE_ERROR)"


def scan(text, path):
    if SKIP.search(path):
        return
    base = os.path.basename(path)
    if base.startswith("help-") and base.endswith(".txt"):
        yield from _common.help_topics(text, path)
    elif path.endswith((".c", ".h")) and path.startswith(C_DIRS):
        specs = dict(SPECS)
        if not path.startswith("ompi/errhandler/"):
            del specs["out"]
        yield from _common.c_calls(generate, text, path, specs, returns_re=RETURNS)  # noqa: F821


CONFIG = {
    "url": "https://github.com/open-mpi/ompi",
    "tags": lambda t: t in ("v4.1.8", "v5.0.10"),
    "trees": ["ompi/", "opal/", "orte/"],
    "extensions": (".txt", ".c", ".h"),
    "macros": {},
    "scan": scan,
}
