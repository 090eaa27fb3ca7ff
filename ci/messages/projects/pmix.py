"""OpenPMIx, the process-management interface Open MPI, PRRTE and Slurm (srun --mpi=pmix) use to
exchange endpoints at startup: its show_help topics (_common.help_topics), its error log
(`PMIX ERROR: %s in file %s at line %d`, src/util/pmix_error.h) and the pmix_output(0, ...)
lines of its transport to the server (src/mca/ptl), client and server code. Tags: the newest
v4.2 (the series Open MPI 5.0 bundles) and the newest release."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402

C_DIRS = ("src/util/pmix_error.h", "src/util/error.h", "src/mca/ptl/", "src/client/", "src/server/",
          "src/runtime/", "src/common/", "src/util/pmix_show_help.c")
SPECS = {"pmix_output": {"level": "ERROR", "fmt": 1, "when": lambda a: a[0] == "0"}}
RETURNS = r"(?:return|rc\s*=|ret\s*=)\s*\(?\s*(PMIX_ERR_\w+|PMIX_ERROR)"


def scan(text, path):
    base = os.path.basename(path)
    if base.startswith("help-") and base.endswith(".txt"):
        yield from _common.help_topics(text, path)
    elif path.endswith((".c", ".h")) and path.startswith(C_DIRS):
        specs = dict(SPECS)
        if path.endswith("pmix_show_help.c"):
            # The line that stands for repeats of a help message: "N more processes have sent
            # help message help-x.txt / topic", built with asprintf and then printed.
            specs["pmix_asprintf"] = {"level": "ERROR", "fmt": 1,
                                      "when": lambda a: "help message" in a[1]}
        yield from _common.c_calls(generate, text, path, specs, returns_re=RETURNS)  # noqa: F821


CONFIG = {
    "url": "https://github.com/openpmix/openpmix",
    "tags": lambda t: t in ("v4.2.9", "v6.1.0"),
    "trees": ["src/"],
    "extensions": (".txt", ".c", ".h"),
    "macros": {},
    "scan": scan,
}
