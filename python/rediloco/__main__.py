"""python3 -m rediloco: the package's command line.

    python3 -m rediloco init --redis URL --run R --from-state FILE.safetensors [coordinator init flags]
    python3 -m rediloco version
"""
import re
import subprocess
import sys

from .errors import DiLoCoError
from .run import coordinator_path

USAGE = """usage: python3 -m rediloco COMMAND ...

  init [flags]   create a run: `coordinator init` with the same flags (see `init --help`); with
                 --from-state FILE.safetensors (e.g. from rediloco.save_state(model, FILE)) the run's
                 version 0 and tensor layout are the file's tensors
  version        the package's and the loaded libdiloco's versions
"""


def _as_python(text):
    """coordinator init's output as `python3 -m rediloco init`'s."""
    return re.sub(r"(?<![\w/-])(?:bin/)?coordinator init\b", "python3 -m rediloco init", text)


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0 if argv else 2
    if argv[0] == "init":
        try:
            path = coordinator_path()
        except DiLoCoError as e:
            print("python3 -m rediloco init: %s" % e, file=sys.stderr)
            return 1
        try:
            p = subprocess.run([path, "init"] + argv[1:], capture_output=True, text=True)
        except OSError as e:
            print("python3 -m rediloco init: cannot run %s (%s): build ReDiLoCo (make) or set REDILOCO_COORDINATOR"
                  % (path, e.strerror), file=sys.stderr)
            return 1
        # its usage line and messages name the command the user typed, not bin/coordinator init
        print(_as_python(p.stdout), end="")
        print(_as_python(p.stderr), end="", file=sys.stderr)
        return p.returncode
    if argv[0] == "version":
        from . import __version__, library_version
        print("rediloco %s, libdiloco %s" % (__version__, library_version()))
        return 0
    print("python3 -m rediloco: unknown command %r\n%s" % (argv[0], USAGE), file=sys.stderr, end="")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
