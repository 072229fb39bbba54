"""errors.py: the package's exceptions."""


class DiLoCoError(RuntimeError):
    """Anything the run or libdiloco refused, with the library's message."""


class Stopped(KeyboardInterrupt):
    """A stop was asked for (SIGINT, SIGTERM, DiLoCo.stop(), the operator shutting the run down).
    Raised by the inner optimizer's step; the `with rediloco.DiLoCo(...)` block swallows it."""
