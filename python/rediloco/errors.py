"""errors.py: the package's exceptions, and where its warnings point (user_stacklevel)."""


class DiLoCoError(RuntimeError):
    """Anything the run or libdiloco refused, with the library's message."""


class Stopped(Exception):
    """A stop was asked for (SIGINT, SIGTERM, DiLoCo.stop(), the operator shutting the run down, another
    rank of the process group asked). Raised by the inner optimizer's step (a process group's: on every rank
    at the same step); the `with rediloco.DiLoCo(...)` block swallows it.

    An Exception, not a KeyboardInterrupt: it is the session's orderly end, which code may catch by name
    (and `except Exception` in a training loop catches it too: re-raise it there)."""


def user_stacklevel():
    """The stacklevel for warnings.warn, called where this is called, that names the first frame outside this
    package and torch (whose optimizer step and scheduler wrappers sit between the user's inner.step() and
    the session's hook, more or fewer of them by torch version): the user's own line."""
    import os
    import sys
    ours = os.path.dirname(os.path.abspath(__file__))
    torch_dir = None
    if "torch" in sys.modules:
        torch_dir = os.path.dirname(os.path.abspath(sys.modules["torch"].__file__))
    frame, level = sys._getframe(1), 1  # level 1: the caller of warnings.warn
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not (path.startswith(ours + os.sep) or (torch_dir and path.startswith(torch_dir + os.sep))):
            return level
        frame, level = frame.f_back, level + 1
    return 1
