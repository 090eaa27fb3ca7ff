"""Scanners shared by project files (not a project: the loader skips names starting with `_`).

Import from a project file as
    _common = _load_common(generate)
where `generate` is the generator module the loader sets on every project module; the
functions below reuse its parsing helpers, so a call here reads exactly as `generate.scan` does.
"""

import re


def c_calls(generate, text, path, specs, subsys_re=None, returns_re=None):
    """Like generate.scan, for macros and functions whose calls need more than a format index:
    specs maps a name to a dict with
      level       "ERROR" | "WARN" | "INFO", or a function of the call's arguments giving it
      fmt         index of the format argument (in the inner list when `inner`)
      flags       index of the argument naming the subsystem (or None)
      prefix      text the macro prints before the format
      suffix      text the macro pastes after it (EFA_WARN_ERRNO's ": %s(%d)")
      inner       the call passes its printf arguments in one parenthesised argument,
                  BTL_ERROR(("fmt", ...)): the index of that argument
      when        a predicate on the call's arguments (stripped): keep the call only if true
    """
    clean = generate.strip_comments(text)
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

    returns = re.compile(returns_re) if returns_re else generate.RESULT
    names = "|".join(sorted(specs, key=len, reverse=True))
    for m in re.finditer(r"(?<![\w.>])(" + names + r")\s*\(", clean):
        spec = specs[m.group(1)]
        before = clean[max(0, m.start() - 200):m.start()].rstrip()
        if before.endswith("define"):
            continue
        args, end = generate.call_args(clean, m.end() - 1)
        if not args:
            continue
        args = [a.strip() for a in args]
        if "when" in spec and not spec["when"](args):
            continue
        fargs = args
        if spec.get("inner") is not None:
            if len(args) <= spec["inner"] or not args[spec["inner"]].startswith("("):
                continue
            inner = args[spec["inner"]]
            fargs, _ = generate.call_args(inner, 0)
            if not fargs:
                continue
        if len(fargs) <= spec["fmt"]:
            continue
        fmt = generate.format_of(fargs[spec["fmt"]])
        if fmt is None or not fmt.strip():
            continue
        fmt = spec.get("prefix", "") + fmt + spec.get("suffix", "")
        line_idx = line_of(m.start())
        end_idx = line_of(end - 1)
        subsys = []
        if spec.get("flags") is not None and subsys_re and len(args) > spec["flags"]:
            subsys = sorted(set(re.findall(subsys_re, args[spec["flags"]])))
        level = spec["level"](args) if callable(spec["level"]) else spec["level"]
        if level is None:
            continue
        yield {
            "level": level,
            "format": fmt,
            "subsys": subsys,
            "file": path,
            "line": line_idx + 1,
            "function": generate.enclosing_function(lines, line_idx),
            "guard": generate.guard_of(lines, line_idx),
            "returns": generate.result_after(lines, line_idx, end_idx, returns),
        }


TOPIC = re.compile(r"^\[([^\]]+)\]\s*$")


def help_topics(text, path, max_lines=4):
    """The topics of an Open MPI / PMIx / PRRTE show_help file (`help-*.txt`): `[topic]` then
    its text up to the next topic; lines starting with `#` are comments. show_help prints the
    text with its %s filled in between two lines of dashes, so each topic's format is its first
    paragraph (at most max_lines lines: the matcher reads the first, a note may name a later
    one). Level: WARN when the text opens with "WARNING"/"Warning", INFO for a usage, version or
    help-text topic, else ERROR (show_help is how these projects report what stops a run)."""
    lines = text.split("\n")
    i, n = 0, len(lines)
    while i < n:
        m = TOPIC.match(lines[i])
        if not m:
            i += 1
            continue
        topic, start = m.group(1), i
        body = []
        i += 1
        while i < n and not TOPIC.match(lines[i]):
            if not lines[i].startswith("#"):
                body.append(lines[i].rstrip())
            i += 1
        while body and not body[0].strip():
            body.pop(0)
        para = []
        for line in body:
            if not line.strip() or len(para) >= max_lines:
                break
            para.append(line)
        if not para:
            continue
        fmt = "\n".join(para)
        first = para[0].lstrip()
        low = topic.lower()
        if re.match(r"(?i)warning\b", first):
            level = "WARN"
        elif re.search(r"usage|version|help|info$|^\s*(?:deprecated)", low):
            level = "INFO"
        else:
            level = "ERROR"
        yield {
            "level": level,
            "format": fmt,
            "subsys": [],
            "file": path,
            "line": start + 1,
            "function": topic,
            "guard": None,
            "returns": None,
        }
