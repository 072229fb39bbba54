"""python3 -m rediloco: the package's command line.

    python3 -m rediloco init --redis URL --run R --from-state FILE.safetensors [coordinator init flags]
    python3 -m rediloco version
"""
import os
import re
import subprocess
import sys
import threading

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


def _relay(src, dst):
    """Copy src's lines to dst as they come, in the words of _as_python. A reader that went away (`| head`)
    ends the copy, not the command: the rest of src is read and dropped, so coordinator init finishes as
    it would with its output discarded."""
    for line in src:
        try:
            dst.write(_as_python(line))
            dst.flush()
        except BrokenPipeError:
            _drop(dst)
            for _ in src:
                pass
            return


def _drop(stream):
    """Point stream's file descriptor at /dev/null: a reader of it went away, and Python's own flush at exit
    would otherwise print a BrokenPipeError for it."""
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, stream.fileno())
    os.close(null)


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
            p = subprocess.Popen([path, "init"] + argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, bufsize=1)
        except OSError as e:
            print("python3 -m rediloco init: cannot run %s (%s): build ReDiLoCo (make) or set REDILOCO_COORDINATOR"
                  % (path, e.strerror), file=sys.stderr)
            return 1
        # its usage line and messages name the command the user typed, not bin/coordinator init; relayed line by
        # line as they come (a large model's init takes a while), stderr on a thread of its own
        err = threading.Thread(target=_relay, args=(p.stderr, sys.stderr))
        err.start()
        try:
            _relay(p.stdout, sys.stdout)
            err.join()
            return p.wait()
        except KeyboardInterrupt:  # (Ctrl-C reached the coordinator too: it stops, and says so)
            return p.wait()
    if argv[0] == "version":
        from . import __version__, library_version
        print("rediloco %s, libdiloco %s" % (__version__, library_version()))
        return 0
    print("python3 -m rediloco: unknown command %r\n%s" % (argv[0], USAGE), file=sys.stderr, end="")
    return 2


if __name__ == "__main__":
    try:
        status = main(sys.argv[1:])
        sys.stdout.flush()
    except BrokenPipeError:  # `python3 -m rediloco --help | head -n 1`: what was asked for was read
        _drop(sys.stdout)
        status = 0
    sys.exit(status)
