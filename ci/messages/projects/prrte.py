"""PRRTE, the runtime that starts Open MPI 5's processes (`mpirun` is `prterun`): its show_help
topics (the same file format as Open MPI's, _common.help_topics), its error log
(`PRTE ERROR: %s in file %s at line %d`, src/util/error.h) and the pmix_output(0, ...) lines of
its launch, out-of-band (oob tcp), state and daemon code. Tags: v3.0's newest (the series
Open MPI 5.0 ships) and the newest release."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402

C_DIRS = ("src/util/error.h", "src/rml/", "src/mca/plm/", "src/mca/state/", "src/mca/errmgr/",
          "src/mca/odls/", "src/prted/", "src/mca/ess/", "src/runtime/")
SPECS = {"pmix_output": {"level": "ERROR", "fmt": 1, "when": lambda a: a[0] == "0"}}
RETURNS = r"(?:return|rc\s*=|ret\s*=)\s*\(?\s*(PRTE_ERR_\w+|PMIX_ERR_\w+|PRTE_ERROR)"


def scan(text, path):
    base = os.path.basename(path)
    if base.startswith("help-") and base.endswith(".txt"):
        yield from _common.help_topics(text, path)
    elif path.endswith((".c", ".h")) and path.startswith(C_DIRS):
        yield from _common.c_calls(generate, text, path, SPECS, returns_re=RETURNS)  # noqa: F821


CONFIG = {
    "url": "https://github.com/openpmix/prrte",
    "tags": lambda t: t in ("v3.0.14", "v4.1.0"),
    "trees": ["src/"],
    "extensions": (".txt", ".c", ".h"),
    "macros": {},
    "scan": scan,
}
