"""errors.py: the package's exceptions."""


class DiLoCoError(RuntimeError):
    """Anything the run or libdiloco refused, with the library's message."""


class Stopped(Exception):
    """A stop was asked for (SIGINT, SIGTERM, DiLoCo.stop(), the operator shutting the run down, another
    rank of the process group asked). Raised by the inner optimizer's step (a process group's: on every rank
    at the same step); the `with rediloco.DiLoCo(...)` block swallows it.

    An Exception, not a KeyboardInterrupt: it is the session's orderly end, which code may catch by name
    (and `except Exception` in a training loop catches it too: re-raise it there)."""
