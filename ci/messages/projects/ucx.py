"""UCX (openucx): ucs_error / ucs_warn / ucs_fatal / ucs_diag in the parts a GPU job's MPI or
NCCL (UCX plugin) goes through: ucs (config, memory, sys, async), uct ib / tcp / cuda / sm /
base, ucp core and wireup. UCX prints `[1700000000.123456] [host:pid:tid] file.c:123  UCX  ERROR
<text>` (src/ucs/debug/log.c, UCS_LOG_FMT); the stored format is <text>. ucs_fatal pastes
"Fatal: " before its format (src/ucs/debug/assert.h). ucs_diag prints only at UCX_LOG_LEVEL=diag
or more and is stored as INFO. Calls whose level is an argument are read too:
ucs_log(LEVEL, fmt, ...) and uct_ib_check_memlock_limit_msg(ctx, LEVEL, fmt, ...) (the IB
resource-creation failures, which append " : Please set max locked memory (ulimit -l) to
'unlimited' (current: N kbytes)" on ENOMEM, src/uct/ib/base/ib_log.c): a constant
UCS_LOG_LEVEL_X gives the level, a variable one (chosen at run time, usually error or diag)
is stored as WARN. glibc's %m (strerror(errno)) is stored as %s. ucs_status_string's texts for error codes are the RESULT entries (what
`... failed: Destination is unreachable` prints). Tags: the two newest releases."""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402

MACROS = {
    "ucs_fatal": ("ERROR", 0, None, "Fatal: "),
    "ucs_error": ("ERROR", 0, None),
    "ucs_warn": ("WARN", 0, None),
    "ucs_diag": ("INFO", 0, None),
}
RETURNS = r"(?:return|status\s*=)\s*\(?\s*(UCS_ERR_\w+)"
LEVELS = {"FATAL": "ERROR", "ERROR": "ERROR", "WARN": "WARN", "DIAG": "INFO", "INFO": "INFO"}


def level_of(arg):
    m = re.fullmatch(r"UCS_LOG_LEVEL_(\w+)", arg.strip())
    if m:
        return LEVELS.get(m.group(1))  # DEBUG, TRACE...: not printed by default, skipped
    return "WARN"


VARIABLE = {
    "ucs_log": {"level": lambda a: level_of(a[0]), "fmt": 1},
    # Printed as "<device>: <fmt> failed: <strerror>[ : Please set max locked memory ...]".
    "uct_ib_check_memlock_limit_msg": {"level": lambda a: level_of(a[1]), "fmt": 2,
                                       "prefix": "%s: ", "suffix": " failed: %s"},
}
# glibc's %m prints strerror(errno): for the matcher it is text like %s.
PERCENT_M = re.compile(r"(?<!%)((?:%%)*)%m")


def scan(text, path):
    for call in list(generate.scan(text, path, MACROS, returns_re=RETURNS)) + list(  # noqa: F821
            _common.c_calls(generate, text, path, VARIABLE, returns_re=RETURNS)):  # noqa: F821
        call["format"] = PERCENT_M.sub(r"\1%s", call["format"])
        yield call


CONFIG = {
    "url": "https://github.com/openucx/ucx",
    "tags": lambda t: t in ("v1.21.0", "v1.22.0"),
    "trees": ["src/ucs/", "src/uct/ib/", "src/uct/base/", "src/uct/tcp/", "src/uct/cuda/",
              "src/uct/sm/", "src/ucp/core/", "src/ucp/wireup/"],
    "macros": MACROS,
    "scan": scan,
    "returns": RETURNS,
    "result_strings": "ucs_status_string",
    "ok_result": ["UCS_OK", "UCS_INPROGRESS"],
}
