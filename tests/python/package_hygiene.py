"""package_hygiene.py SRC_DIR: the installed rediloco's public API is type-hinted (every parameter and
return of every public function and method resolves with typing.get_type_hints), no `raise` inside
an `except` block of SRC_DIR's sources drops the exception it handles (it says `from e` or `from None`,
or re-raises), and every callback type of rediloco._lib takes a hook's error buffer (`char *err, size_t
errlen`) as an address, through which a Python callback's message reaches the C buffer (a c_char_p handed
the callback a bytes copy: the process group's collectives failed with "(no message)", their text written
past that copy's end). Prints what is wrong and exits 1, else one summary line."""
import ast
import ctypes
import inspect
import os
import sys
import typing

import torch

import rediloco
from rediloco import _lib

SKIP_PARAMS = ("self", "cls", "exc_type", "exc", "tb")


def public_functions():
    for name in rediloco.__all__:
        obj = getattr(rediloco, name)
        if inspect.isfunction(obj):
            yield name, obj
        elif inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if attr.startswith("_") and attr not in ("__init__", "__enter__", "__exit__"):
                    continue
                member = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
                if inspect.isfunction(member):
                    yield "%s.%s" % (name, attr), member


def unhinted():
    checked, wrong = 0, []
    for name, f in public_functions():
        hints = typing.get_type_hints(f, globalns=dict(f.__globals__, torch=torch))
        lacks = [p for p in inspect.signature(f).parameters if p not in SKIP_PARAMS and p not in hints]
        lacks += [] if "return" in hints else ["return"]
        if lacks:
            wrong.append("%s: no type hint for %s" % (name, ", ".join(lacks)))
        checked += 1
    return checked, wrong


def unchained(src):
    wrong = []
    for root, _, files in os.walk(src):
        for fn in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(root, fn)
            for handler in ast.walk(ast.parse(open(path).read(), path)):
                if not isinstance(handler, ast.ExceptHandler):
                    continue
                for node in ast.walk(handler):
                    if isinstance(node, ast.Raise) and node.exc is not None and node.cause is None:
                        wrong.append("%s:%d: raise without `from` inside an except block" % (path, node.lineno))
    return wrong


def callback_errs():
    """Each of _lib's callback types whose last two arguments are (err, errlen), called as libdiloco calls
    it, with a real buffer: a Python callback's _lib.fill_err must land in that buffer."""
    checked, wrong = 0, []
    for name, fn in sorted(vars(_lib).items()):
        argtypes = getattr(fn, "_argtypes_", None)
        if not (isinstance(fn, type) and argtypes and len(argtypes) >= 3 and argtypes[-1] is ctypes.c_size_t and
                getattr(fn, "_restype_", None) is ctypes.c_int):  # (a hook returning its status: 0 or -1 + err)
            continue
        if argtypes[-2] is ctypes.c_char_p:
            wrong.append("_lib.%s takes err as c_char_p: a Python callback's message never reaches the buffer" % name)
            continue
        if argtypes[-2] is not ctypes.c_void_p:
            continue

        def failing(*args):
            _lib.fill_err(args[-2], args[-1], RuntimeError("injected by package_hygiene"))
            return -1

        buf = ctypes.create_string_buffer(64)
        zeros = [t() if t in (ctypes.c_int, ctypes.c_size_t, ctypes.c_double) else None for t in argtypes[:-2]]
        fn(failing)(*zeros, ctypes.cast(buf, ctypes.c_void_p), len(buf))
        if buf.value != b"RuntimeError: injected by package_hygiene":
            wrong.append("_lib.%s: a callback's message did not reach the C buffer (it holds %r)" % (name, buf.value))
        checked += 1
    if checked < 5:
        wrong.append("only %d callback types with an error buffer found in _lib" % checked)
    return checked, wrong


checked, wrong = unhinted()
wrong += unchained(sys.argv[1])
ncallbacks, wrong_cb = callback_errs()
wrong += wrong_cb
if checked < 20:
    wrong.append("only %d public functions found" % checked)
print("\n".join(wrong) if wrong else "%d public functions type-hinted, every raise in an except chained, %d "
      "callback types hand Python's error messages to libdiloco's buffer" % (checked, ncallbacks))
sys.exit(1 if wrong else 0)
