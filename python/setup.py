"""setup.py: the one step pyproject.toml cannot say, where libdiloco comes from (docs/python.md "Installing").

The package is pure Python over libdiloco.so through ctypes (rediloco/_lib.py). At build time this puts
into the package, as rediloco/libdiloco.so.0, the first of:
    $REDILOCO_LIB                 an explicit path
    ../build/libdiloco.so         the source tree this folder lives in (`make python` or `make lib`)
and libdiloco_cuda.so.0 the same way ($REDILOCO_CUDA_LIB, ../build/libdiloco_cuda.so) when there is one.
With no library found, the package is built without one and records where `make install` put it
(`pkg-config --variable=libdir libdiloco`, so PKG_CONFIG_PATH finds a PREFIX of your own) in
rediloco/_libdir.py; at run time _lib.py also tries the dynamic loader's path.
"""
import os
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
TREE_BUILD = os.path.join(HERE, "..", "build")


def _found(env, tree_name):
    """The library to bundle: $env when set (empty: none), else the source tree's build, else None."""
    if env in os.environ:
        return os.environ[env] or None
    path = os.path.join(TREE_BUILD, tree_name)
    return path if os.path.exists(path) else None


def _installed_libdir():
    """libdiloco's libdir as `make install` recorded it in libdiloco.pc, or None."""
    try:
        p = subprocess.run(["pkg-config", "--variable=libdir", "libdiloco"], capture_output=True, text=True)
    except OSError:
        return None
    return (p.stdout.strip() or None) if p.returncode == 0 else None


BUNDLE = {"libdiloco.so.0": _found("REDILOCO_LIB", "libdiloco.so"),
          "libdiloco_cuda.so.0": _found("REDILOCO_CUDA_LIB", "libdiloco_cuda.so")}


class BuildPy(build_py):
    def run(self):
        super().run()
        pkg = os.path.join(self.build_lib, "rediloco")
        for name, src in list(BUNDLE.items()) + [("_libdir.py", None)]:
            dst = os.path.join(pkg, name)
            if src is not None:
                self.copy_file(src, dst, preserve_mode=True)
            elif os.path.exists(dst):
                os.remove(dst)  # left by an earlier build in the same build folder
        if BUNDLE["libdiloco.so.0"] is None:
            libdir = _installed_libdir()
            print("rediloco: no libdiloco to bundle (build the tree with `make python`, or set REDILOCO_LIB); "
                  "using the installed one%s" % (" in " + libdir if libdir else " on the loader's path"))
            with open(os.path.join(pkg, "_libdir.py"), "w") as f:
                f.write('"""Where `make install` put libdiloco, as pkg-config said when this package was built."""\n'
                        "LIBDIR = %r\n" % libdir)


class BinaryDistribution(Distribution):
    """A wheel holding libdiloco is for this platform only (not py3-none-any)."""
    def has_ext_modules(self):
        return BUNDLE["libdiloco.so.0"] is not None


setup(cmdclass={"build_py": BuildPy}, distclass=BinaryDistribution)
