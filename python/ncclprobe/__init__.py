"""ncclprobe: the command-line tool, installed as a binary beside this package.

``python -m ncclprobe ARGS`` runs it as ``ncclprobe ARGS`` does; :func:`binary` says where it is.
"""

import os
import sys
import sysconfig

__all__ = ["binary", "main"]


def binary():
    """The path of the ncclprobe executable this package was installed with."""
    names = ["ncclprobe"]
    schemes = [None, f"{os.name}_user"]
    tried = []
    for scheme in schemes:
        try:
            scripts = sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts")
        except KeyError:
            continue
        for name in names:
            path = os.path.join(scripts, name)
            tried.append(path)
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
    # An installation whose scripts directory moved (a relocated venv): beside the interpreter.
    path = os.path.join(os.path.dirname(sys.executable), "ncclprobe")
    tried.append(path)
    if os.path.isfile(path) and os.access(path, os.X_OK):
        return path
    raise FileNotFoundError("the ncclprobe executable is not installed; looked at " + ", ".join(tried))


def main(argv=None):
    """Replace this process with ncclprobe, given ``argv`` (default: this process's arguments)."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        exe = binary()
    except FileNotFoundError as e:
        print(f"ncclprobe: {e}", file=sys.stderr)
        return 127
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(exe, [exe] + args)
