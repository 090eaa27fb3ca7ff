"""PyTorch's distributed layer: what torch.distributed (c10d) and torchelastic print or raise
around NCCL. Its messages are not printf calls but C++ streams and string building, so this
file gives its own scan:

  C++ (torch/csrc/distributed/c10d/: ProcessGroupNCCL, NCCLUtils, Flight Recorder, Work,
  TCPStore, socket, Backoff, logger, Utils, ProcessGroup/Backend)
    LOG(ERROR|WARNING|INFO) << a << "b" << c;  ->  ERROR | WARN | INFO "%sb%s"
    TORCH_CHECK(cond, pieces...), TORCH_CHECK_WITH(Type, cond, pieces...),
    TORCH_INTERNAL_ASSERT(cond, pieces...), C10_THROW_ERROR(Type, msg), throw T(msg)
                                                ->  ERROR, `returns` = the exception type
    TORCH_WARN(...), TORCH_WARN_ONCE(...)       ->  WARN
    a message built on its own (c10::str(...), or "literal" + expr + ... assigned to a
    string), as the watchdog builds "Watchdog caught collective operation timeout: ..." and
    NCCLUtils.hpp's C10D_NCCL_CHECK builds "NCCL error in: FILE:LINE, <ncclGetErrorString>":
    ERROR when its text speaks of a failure (error, fail, timed out, timeout, abort,
    exception, terminat, hang, stuck, unable, cannot, invalid, not listening), else INFO.
  In every message string literals are kept (a literal % doubled, so the format stays
  printf-like) and every expression becomes %s: the printed value of a stream or c10::str
  piece is text of any shape.

  Python (torch/distributed/elastic/): logger.error/exception/critical (ERROR),
  logger.warning and warnings.warn (WARN), logger.info (INFO), raise X(...) (ERROR,
  returns X), f-strings assigned to a *message*/*msg* name (ERROR or INFO by the same words
  as above), and string.Template reports (torchelastic's failure summary, one entry per
  line, ERROR); read with the ast module; f-string fields and %r/%(name)s become %s.

Tags: PyTorch's repository is too big to mirror here (4 GB, over the fetch limit), so the tags
are release source trees put into a small local git repository, one commit and tag per release:

  python3 ci/messages/projects/pytorch.py build-tree GITDIR TAG SOURCE_TARBALL
  ci/messages/generate pytorch GITDIR

SOURCE_TARBALL is the upstream release source; the one read so far is v2.6.0, from Debian's
pytorch_2.6.0+dfsg.orig.tar.xz (`apt-get source --download-only pytorch/trixie` with a
trixie deb-src line; the orig tarball is upstream's tree minus non-free third-party files, and
the c10d and elastic sources are upstream's). With a clone of pytorch/pytorch the tags can be
read directly instead: `ci/messages/generate pytorch CLONE --tags 'v2.[2-9].*'`.
"""

import ast
import os
import re

FILES = re.compile(
    r"^torch/csrc/distributed/c10d/(ProcessGroupNCCL|NCCLUtils|FlightRecorder|TraceUtils|Work|"
    r"TCPStore|socket|Backoff|logger|Utils|ProcessGroup\.|Backend\.)[^/]*\.(cpp|hpp|h|cu)$"
    r"|^torch/distributed/elastic/.*\.py$")

STRING = r'"(?:[^"\\\n]|\\.)*"'
LITERALS = re.compile(r"^\s*(?:" + STRING + r"\s*)+$")
ONE_LITERAL = re.compile(STRING)
FAILURE = re.compile(r"(?i)error|fail|timed out|timeout|abort|exception|terminat|hang|stuck|"
                     r"unable|cannot|can't|invalid|not listening")


def _decode(lit):
    body = lit[1:-1]
    if "\\" in body:
        body = bytes(body, "utf-8").decode("unicode_escape", errors="replace")
    return body.replace("%", "%%")


def fmt_style(lit):
    """The printf-like format of a {fmt} format string literal: each {} field becomes %s."""
    text = "".join(_decode(m.group(0)) for m in ONE_LITERAL.finditer(lit))
    text = text.replace("{{", "\0").replace("}}", "\1")
    text = re.sub(r"\{[^{}]*\}", "%s", text)
    return text.replace("\0", "{").replace("\1", "}")


def _split_top(expr, sep):
    """Split expr at top-level occurrences of sep ("<<" or "+"), outside strings and brackets."""
    parts, depth, i, start, n = [], 0, 0, 0, len(expr)
    while i < n:
        c = expr[i]
        if c == '"' or c == "'":
            q = c
            i += 1
            while i < n and expr[i] != q:
                i += 2 if expr[i] == "\\" else 1
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and expr.startswith(sep, i):
            # `+` of `++`, `+=` and of a unary `+x` are not concatenation.
            if sep == "+" and (expr.startswith("++", i) or expr.startswith("+=", i)):
                i += 2
                continue
            parts.append(expr[start:i])
            i += len(sep)
            start = i
            continue
        i += 1
    parts.append(expr[start:])
    return parts


def _call_span(generate, expr, names):
    """If expr is exactly one call of a name in names, its arguments."""
    m = re.match(r"^\s*(?:" + names + r")\s*\(", expr)
    if not m:
        return None
    args, end = generate.call_args(expr, m.end() - 1)
    if args is None or expr[end:].strip():
        return None
    return args


def pieces(generate, expr):
    """The format text an expression prints: literals kept, everything else %s."""
    expr = expr.strip()
    if not expr:
        return ""
    if LITERALS.match(expr):
        return "".join(_decode(m.group(0)) for m in ONE_LITERAL.finditer(expr))
    args = _call_span(generate, expr, r"c10::str|::c10::str|str")
    if args is not None:
        return "".join(pieces(generate, a) for a in args)
    args = _call_span(generate, expr, r"fmt::format|c10d::detail::formatLogMessage")
    if args is not None:
        return fmt_style(args[0]) if LITERALS.match(args[0]) else "%s"
    args = _call_span(generate, expr, r"std::string")
    if args is not None and len(args) == 1 and LITERALS.match(args[0]):
        return pieces(generate, args[0])
    if expr.startswith("(") and expr.endswith(")"):
        inner, end = generate.call_args(expr, 0)
        if inner is not None and len(inner) == 1 and end == len(expr):
            return pieces(generate, inner[0])
    parts = _split_top(expr, "+")
    if len(parts) > 1 and any(LITERALS.match(p) or _call_span(generate, p, r"c10::str|std::string")
                              for p in parts):
        return "".join(pieces(generate, p) for p in parts)
    return "%s"


def _tidy(fmt):
    fmt = re.sub(r"(%s)+", "%s", fmt)
    return fmt.strip("\n")


def _literal_len(fmt):
    return len(re.sub(r"%s|\s", "", fmt))


LOG = re.compile(r"(?<![\w.])(?:LOG|LOG_FIRST_N|LOG_EVERY_N|C10_LOG_FIRST_N|C10_LOG_EVERY_MS|"
                 r"C10_LOG_EVERY_N)\s*\(\s*(ERROR|WARNING|INFO|FATAL)\b")
LOG_LEVEL = {"ERROR": "ERROR", "FATAL": "ERROR", "WARNING": "WARN", "INFO": "INFO"}
CHECKS = {
    "TORCH_CHECK": (1, None), "TORCH_CHECK_WITH": (2, 0), "TORCH_INTERNAL_ASSERT": (1, None),
    "C10_THROW_ERROR": (1, 0), "TORCH_WARN": (0, None), "TORCH_WARN_ONCE": (0, None),
    "TORCH_CHECK_TYPE": (1, None), "TORCH_CHECK_VALUE": (1, None),
    "TORCH_CHECK_NOT_IMPLEMENTED": (1, None),
    "C10D_THROW_ERROR": (1, 0),
    "C10D_ERROR": (0, None), "C10D_WARNING": (0, None), "C10D_INFO": (0, None),
}
# c10d's own log macros (logging.h): fmt-style format, printed after "[c10d] " by LOG(level).
C10D_LOG = {"C10D_ERROR": "ERROR", "C10D_WARNING": "WARN", "C10D_INFO": "INFO"}
CHECK_RETURNS = {"TORCH_CHECK": "c10::Error", "TORCH_INTERNAL_ASSERT": "c10::Error",
                 "TORCH_CHECK_TYPE": "c10::TypeError", "TORCH_CHECK_VALUE": "c10::ValueError",
                 "TORCH_CHECK_NOT_IMPLEMENTED": "c10::NotImplementedError"}
CALL = re.compile(r"(?<![\w.>:])(" + "|".join(sorted(CHECKS, key=len, reverse=True)) +
                  r")\s*\(|(?<![\w.])throw\s+((?:[\w]+::)*\w+)\s*\(|(?<![\w.>])((?:::)?c10::str|fmt::format)\s*\(")


def cpp_scan(generate, text, path):
    # Comments out, line continuations of macros joined (same length, so offsets hold).
    clean = generate.strip_comments(text).replace("\\\n", " \n")
    lines = text.split("\n")
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)

    def line_of(pos):
        lo, hi = 0, len(starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if starts[mid] <= pos:
                lo = mid
            else:
                hi = mid - 1
        return lo

    taken = []  # spans already read as part of a larger message

    def inside(pos):
        return any(a <= pos < b for a, b in taken)

    def entry(level, fmt, pos, returns):
        fmt = _tidy(fmt)
        if _literal_len(fmt) < 8:
            return None
        idx = line_of(pos)
        return {"level": level, "format": fmt, "subsys": [], "file": path, "line": idx + 1,
                "function": generate.enclosing_function(lines, idx),
                "guard": generate.guard_of(lines, idx), "returns": returns}

    out = []
    for m in LOG.finditer(clean):
        if clean[max(0, m.start() - 40):m.start()].rstrip().endswith("define"):
            continue
        _, end = generate.call_args(clean, clean.index("(", m.start()))
        stop = end
        depth = 0
        while stop < len(clean):
            c = clean[stop]
            if c == '"':
                stop += 1
                while stop < len(clean) and clean[stop] != '"':
                    stop += 2 if clean[stop] == "\\" else 1
            elif c in "([{":
                depth += 1
            elif c in ")]}":
                depth -= 1
            elif c == ";" and depth <= 0:
                break
            stop += 1
        stream = clean[end:stop].strip()
        if not stream.startswith("<<"):
            continue
        fmt = "".join(pieces(generate, p) for p in _split_top(stream[2:], "<<"))
        taken.append((m.start(), stop))
        e = entry(LOG_LEVEL[m.group(1)], fmt, m.start(), None)
        if e:
            out.append(e)
    for m in CALL.finditer(clean):
        if inside(m.start()) or clean[max(0, m.start() - 40):m.start()].rstrip().endswith("define"):
            continue
        args, end = generate.call_args(clean, m.end() - 1)
        if not args:
            continue
        if m.group(1) in C10D_LOG:
            if not args or not LITERALS.match(args[0]):
                continue
            fmt = "[c10d] " + fmt_style(args[0])
            taken.append((m.start(), end))
            e = entry(C10D_LOG[m.group(1)], fmt, m.start(), None)
            if e:
                out.append(e)
            continue
        if m.group(1):
            name = m.group(1)
            first, type_at = CHECKS[name]
            level = "WARN" if name.startswith("TORCH_WARN") else "ERROR"
            returns = (args[type_at].strip() if type_at is not None else CHECK_RETURNS.get(name))
            msg = args[first:]
        elif m.group(2):
            level, returns, msg = "ERROR", m.group(2), args
        else:
            # A message built on its own (not a piece of a larger message read above).
            level, returns, msg = None, None, args
        if m.group(3) == "fmt::format":
            if not args or not LITERALS.match(args[0]):
                continue
            fmt = fmt_style(args[0])
        else:
            fmt = "".join(pieces(generate, a) for a in msg)
        taken.append((m.start(), end))
        if level is None:
            level = "ERROR" if FAILURE.search(fmt.replace("%s", "")) else "INFO"
        e = entry(level, fmt, m.start(), returns)
        if e:
            out.append(e)
    # "literal" + expr + ... chains assigned to a string (C10D_NCCL_CHECK's "NCCL error in: ").
    for m in re.finditer(r"(?:=|\+=|return)\s*(" + STRING + r")\s*\+", clean):
        if inside(m.start(1)):
            continue
        stop, depth = m.start(1), 0
        while stop < len(clean):
            c = clean[stop]
            if c == '"':
                stop += 1
                while stop < len(clean) and clean[stop] != '"':
                    stop += 2 if clean[stop] == "\\" else 1
            elif c in "([{":
                depth += 1
            elif c in ")]}":
                if depth == 0:
                    break
                depth -= 1
            elif c in ";," and depth == 0:
                break
            stop += 1
        fmt = pieces(generate, clean[m.start(1):stop])
        taken.append((m.start(1), stop))
        level = "ERROR" if FAILURE.search(fmt.replace("%s", "")) else "INFO"
        e = entry(level, fmt, m.start(1), None)
        if e:
            out.append(e)
    out.sort(key=lambda e: e["line"])
    return out


# --- Python -----------------------------------------------------------------------------------

PY_LEVELS = {"error": "ERROR", "exception": "ERROR", "critical": "ERROR", "fatal": "ERROR",
             "warning": "WARN", "warn": "WARN", "info": "INFO"}
PY_LOGGERS = {"logger", "log", "_logger", "LOG", "logging", "_log"}


def _py_text(node, has_args):
    """The format a Python message expression prints."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        s = node.value
        if has_args:
            s = re.sub(r"%\([^)]*\)([sdrif])", r"%\1", s).replace("%r", "%s").replace("%i", "%d")
            return s
        return s.replace("%", "%%")
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value.replace("%", "%%") if isinstance(v, ast.Constant) else "%s"
                       for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        return _py_text(node.left, True)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _py_text(node.left, False) + _py_text(node.right, False)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "format" and isinstance(node.func.value, ast.Constant)
            and isinstance(node.func.value.value, str)):
        s = node.func.value.value.replace("%", "%%")
        s = re.sub(r"\{[^{}]*\}", "%s", s.replace("{{", "\0").replace("}}", "\1"))
        return s.replace("\0", "{").replace("\1", "}")
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "str":
        return "%s"
    return "%s"


def py_scan(text, path):
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    lines = text.split("\n")
    parents = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node

    def context(node):
        guard, function, n = None, None, node
        while n in parents:
            p = parents[n]
            if guard is None and isinstance(p, ast.If):
                guard = ("if " if n in p.body else "else of if ") + ast.unparse(p.test)
            if guard is None and isinstance(p, ast.ExceptHandler):
                guard = "except " + (ast.unparse(p.type) if p.type else "")
            if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef)):
                function = p.name if function is None else function
                cls = next((q for q in _ancestors(p) if isinstance(q, ast.ClassDef)), None)
                if cls is not None and "." not in function:
                    function = cls.name + "." + function
                break
            n = p
        return function, guard[:240] if guard else None

    def _ancestors(n):
        while n in parents:
            n = parents[n]
            yield n

    out = []
    for node in ast.walk(tree):
        level, msg, has_args, returns = None, None, False, None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            f = node.func
            owner = f.value.id if isinstance(f.value, ast.Name) else None
            if f.attr in PY_LEVELS and owner in PY_LOGGERS and node.args:
                level, msg, has_args = PY_LEVELS[f.attr], node.args[0], len(node.args) > 1
            elif f.attr == "warn" and owner == "warnings" and node.args:
                level, msg = "WARN", node.args[0]
        elif isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
            func = node.exc.func
            returns = func.id if isinstance(func, ast.Name) else (
                func.attr if isinstance(func, ast.Attribute) else None)
            level, msg = "ERROR", node.exc.args[0]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.attr if isinstance(t, ast.Attribute) else getattr(t, "id", "")
                     for t in targets]
            value = node.value
            if (isinstance(value, ast.Constant) and isinstance(value.value, str)
                    and "${" in value.value):
                # A string.Template of a report (torchelastic's failure summary): each of
                # its lines is printed as a line of its own.
                function, guard = context(node)
                for k, line in enumerate(value.value.split("\n")):
                    fmt = re.sub(r"\$\{\w+\}|\$\w+", "%s", line.replace("%", "%%")).rstrip()
                    if _literal_len(fmt) >= 8:
                        out.append({"level": "ERROR", "format": fmt.strip(), "subsys": [],
                                    "file": path, "line": node.lineno + k, "function": function,
                                    "guard": None, "returns": None})
                continue
            if any(re.search(r"(?i)message|msg", n) for n in names) and isinstance(
                    value, (ast.JoinedStr, ast.BinOp)):
                # A message built for later use: as for C++, its words say what it reports.
                msg = value
                level = "ERROR" if FAILURE.search(_py_text(value, False)) else "INFO"
        if level is None:
            continue
        fmt = _tidy(_py_text(msg, has_args))
        if _literal_len(fmt) < 8:
            continue
        function, guard = context(node)
        out.append({"level": level, "format": fmt, "subsys": [], "file": path,
                    "line": node.lineno, "function": function, "guard": guard,
                    "returns": returns})
    out.sort(key=lambda e: e["line"])
    return out


INTERPRET = re.compile(r'case\s+(nccl\w+)\s*:\s*interpret\s*=\s*((?:"(?:[^"\\]|\\.)*"\s*)+);')


def result_texts(text, path):
    """getNcclErrorDetailStr's words for each NCCL result code (NCCLUtils.cpp): what PyTorch
    puts before "Last error:" in a DistBackendError."""
    out = []
    for m in INTERPRET.finditer(text):
        literal = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(2))).strip()
        out.append({"level": "RESULT", "format": literal, "subsys": [], "file": path,
                    "line": text.count("\n", 0, m.start()) + 1, "function": "getNcclErrorDetailStr",
                    "guard": "case " + m.group(1), "returns": m.group(1)})
    return out


def scan(text, path):
    if not FILES.match(path):
        return []
    if path.endswith(".py"):
        return py_scan(text, path)
    found = cpp_scan(generate, text, path)  # noqa: F821  (set by the loader)
    if path.endswith("NCCLUtils.cpp"):
        found = list(found) + result_texts(text, path)
    return found


def build_tree(gitdir, tag, tarball):
    """Add the c10d and elastic sources of one release tarball to gitdir as a commit tagged tag."""
    import subprocess
    import tarfile
    import tempfile

    os.makedirs(gitdir, exist_ok=True)
    if not os.path.isdir(os.path.join(gitdir, ".git")):
        subprocess.run(["git", "init", "-q", gitdir], check=True)
    with tarfile.open(tarball) as tar, tempfile.TemporaryDirectory() as tmp:
        keep = [m for m in tar.getmembers() if m.isfile() and re.search(
            r"^[^/]+/(torch/csrc/distributed/c10d/|torch/distributed/elastic/|version\.txt$)", m.name)]
        tar.extractall(tmp, members=keep)
        (top,) = os.listdir(tmp)
        for sub in ("torch/csrc/distributed/c10d", "torch/distributed/elastic"):
            subprocess.run(["rm", "-rf", os.path.join(gitdir, sub)], check=True)
            os.makedirs(os.path.dirname(os.path.join(gitdir, sub)), exist_ok=True)
            subprocess.run(["cp", "-r", os.path.join(tmp, top, sub), os.path.join(gitdir, sub)],
                           check=True)
        subprocess.run(["cp", os.path.join(tmp, top, "version.txt"), gitdir], check=True)
    git = ["git", "-C", gitdir, "-c", "user.name=ncclprobe", "-c", "user.email=ncclprobe@localhost"]
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-qm", f"{tag} from {os.path.basename(tarball)}"], check=True)
    subprocess.run(git + ["tag", "-f", tag], check=True)


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 5 or sys.argv[1] != "build-tree":
        sys.exit("usage: pytorch.py build-tree GITDIR TAG SOURCE_TARBALL")
    build_tree(*sys.argv[2:])


CONFIG = {
    "url": "https://github.com/pytorch/pytorch",
    "tags": lambda t: re.fullmatch(r"v2\.\d+\.\d+", t) is not None,
    "trees": ["torch/csrc/distributed/c10d/", "torch/distributed/elastic/"],
    "extensions": (".cpp", ".hpp", ".h", ".cu", ".py"),
    "macros": {},
    "scan": scan,
}
