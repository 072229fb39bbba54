"""package_hygiene.py SRC_DIR: the installed rediloco's public API is type-hinted (every parameter and
return of every public function and method resolves with typing.get_type_hints), and no `raise` inside
an `except` block of SRC_DIR's sources drops the exception it handles (it says `from e` or `from None`,
or re-raises). Prints what is wrong and exits 1, else one summary line."""
import ast
import inspect
import os
import sys
import typing

import torch

import rediloco

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


checked, wrong = unhinted()
wrong += unchained(sys.argv[1])
if checked < 20:
    wrong.append("only %d public functions found" % checked)
print("\n".join(wrong) if wrong else "%d public functions type-hinted, every raise in an except chained" % checked)
sys.exit(1 if wrong else 0)
