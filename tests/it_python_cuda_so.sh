#!/bin/sh
# it_python_cuda_so.sh: build/libdiloco_cuda.so, the CUDA device hooks the Python package uses for a CUDA
# model (rediloco/devicehooks.py), as built here without a GPU:
#   - it exists after `make` when nvcc does (skipped, 77, without nvcc), has soname libdiloco_cuda.so.0 and
#     exports exactly diloco_cuda_ops_for and diloco_cuda_release (nm -D: nothing of libcommon or the kernels);
#   - the package loads it through ctypes from the source tree, and its entry runs: a NULL parameter
#     pointer gets the entry's own error, and without a GPU a real pointer gets the CUDA runtime's error
#     (no device) instead of a crash; with a GPU it fills the hooks for a torch CUDA tensor and releases them;
#   - `make install-python` puts libdiloco_cuda.so.0 next to the package, and the installed package picks it.
#     That part builds libdiloco from source when build/ is not up to date: it is skipped, with the missing
#     headers named, where a build dependency is absent (a GPU machine given only the build tree and the
#     runtime libraries); the parts above still run.
cd "$(dirname "$0")/.." || exit 1
NVCC=$(command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
if [ -z "$NVCC" ]; then echo "nvcc not found: build/libdiloco_cuda.so is not built: skipped"; exit 77; fi
. tests/lib.sh
need_torch
SO=build/libdiloco_cuda.so
[ -f $SO ] || fail "$SO missing although nvcc exists: run make"
readelf -d $SO | grep -q 'SONAME.*\[libdiloco_cuda.so.0\]' || fail "soname: $(readelf -d $SO | grep SONAME)"
syms=$(nm -D --defined-only $SO | awk '{print $3}' | sort | tr '\n' ' ')
[ "$syms" = "diloco_cuda_ops_for diloco_cuda_release " ] || fail "exported symbols: $syms"
cd python && $PYTHON - > "$TMP/load.log" 2>&1 <<'PY' || fail "ctypes: $(cat "$TMP/load.log")"
import ctypes
import os
import torch
from rediloco import _lib, devicehooks
lib = devicehooks.load_cuda()
assert lib is not None, devicehooks.cuda_library_status()
assert os.path.realpath(lib.path) == os.path.realpath("../build/libdiloco_cuda.so"), lib.path
ops, handle, err = _lib.DeviceOps(), ctypes.c_void_p(), ctypes.create_string_buffer(512)
rc = lib.diloco_cuda_ops_for(None, 10, None, 0, ctypes.byref(ops), ctypes.byref(handle), err, 512)
assert rc == -1 and b"no device parameters" in err.value and not handle, (rc, err.value)
if not torch.cuda.is_available():
    buf = (ctypes.c_float * 10)()
    rc = lib.diloco_cuda_ops_for(ctypes.cast(buf, _lib.c_float_p), 10, None, 0, ctypes.byref(ops),
                                 ctypes.byref(handle), err, 512)
    assert rc == -1 and err.value.startswith(b"cuda: cudaSetDevice") and not handle and not ops.delta, (rc, err.value)
    print("no GPU: the entry reports", err.value.decode())
else:
    t = torch.zeros(10, device="cuda")
    hooks = devicehooks.CudaHooks(t, t.device.index, torch.cuda.current_stream().cuda_stream)
    assert hooks.handle and hooks.ops.delta and hooks.ops.load and hooks.ops.host_alloc
    hooks.release()
    print("GPU: hooks filled for a CUDA tensor and released")
PY
cd ..
# the headers libdiloco compiles against (Makefile LDLIBS), and the Debian package that has each
missing=""
for h in hiredis/hiredis.h:libhiredis-dev msgpack.h:libmsgpack-dev xxhash.h:libxxhash-dev jansson.h:libjansson-dev \
  openssl/evp.h:libssl-dev; do
  printf '#include <%s>\n' "${h%%:*}" | ${CC:-cc} -E -x c - > /dev/null 2>&1 || missing="$missing ${h%%:*} (${h#*:})"
done
if [ -n "$missing" ] && ! make -q build/libdiloco.so $SO > /dev/null 2>&1; then
  say "$SO: exports only diloco_cuda_*, loads with ctypes ($(tail -n 1 "$TMP/load.log")); the install part is SKIPPED: it would rebuild libdiloco, and these build headers are missing:$missing (make deps installs them)"
  exit 0
fi
make -s install-python PREFIX="$TMP/prefix" > "$TMP/install.log" 2>&1 || fail "install: $(cat "$TMP/install.log")"
site=$($PYTHON -c 'import sys; print("lib/python%d.%d/dist-packages" % sys.version_info[:2])')
PKG="$TMP/prefix/$site"
[ -f "$PKG/rediloco/libdiloco_cuda.so.0" ] || fail "install-python: no libdiloco_cuda.so.0 in $PKG/rediloco"
got=$(cd "$TMP" && env -u PYTHONPATH PYTHONPATH="$PKG" $PYTHON -c \
  'from rediloco import devicehooks; print(devicehooks.cuda_library_status())' 2>&1)
[ "$got" = "$PKG/rediloco/libdiloco_cuda.so.0" ] || fail "the installed package loads $got"
say "$SO: exports only diloco_cuda_*, loads with ctypes ($(tail -n 1 "$TMP/load.log")), installed beside the package"
