#!/bin/sh
# it_python_install.sh: `make install-python` gives a package that works outside the source tree.
#   - DESTDIR staging puts the package and libdiloco.so.0 under DESTDIR/PREFIX only;
#   - after `make install-python PREFIX=$TMP/prefix`, a script run from another folder with only that
#     dist-packages on its path imports the installed package (not the tree's), loads the libdiloco.so.0
#     installed beside it, reports the library's version, and syncs a round of a real run;
#   - `make uninstall-python` removes it.
. "$(dirname "$0")/lib.sh"
make -s install-python PREFIX=/usr/local DESTDIR="$TMP/stage" > "$TMP/stage.log" 2>&1 || fail "DESTDIR install: $(cat "$TMP/stage.log")"
site=$($PYTHON -c 'import sys; print("lib/python%d.%d/dist-packages" % sys.version_info[:2])')
[ -f "$TMP/stage/usr/local/$site/rediloco/__init__.py" ] && [ -f "$TMP/stage/usr/local/$site/rediloco/libdiloco.so.0" ] \
  && [ -f "$TMP/stage/usr/local/$site/rediloco/examples/gpt.py" ] || fail "staged files: $(find "$TMP/stage" -type f | head)"
make -s install-python PREFIX="$TMP/prefix" > "$TMP/install.log" 2>&1 || fail "install: $(cat "$TMP/install.log")"
PKG="$TMP/prefix/$site"
start_redis
RUN=inst
init_run $RUN --trainer quadratic --numel 3000 --shards 2 --workers 1
start_server s1
cat > "$TMP/use.py" <<'PY'
import sys
import torch
import rediloco
from rediloco import _lib
print("package", rediloco.__file__)
print("version", rediloco.__version__, rediloco.library_version())
print("library", _lib.load().path)
m = torch.nn.Module()
m.x = torch.nn.Parameter(torch.zeros(3000))
opt = torch.optim.SGD(m.parameters(), lr=0.1)
with rediloco.DiLoCo(sys.argv[1], sys.argv[2], m, opt, sync_every=3, worker_id="inst", connect_timeout=5) as dl:
    for _ in range(3):
        m.x.grad = torch.ones(3000)
        opt.step()
    print("synced to version", dl.last_sync.version)
PY
(cd "$TMP" && env -u PYTHONPATH PYTHONPATH="$PKG" $PYTHON use.py "$URL" $RUN) > "$TMP/use.log" 2>&1 \
  || fail "the installed package: $(cat "$TMP/use.log")"
grep -q "^package $PKG/rediloco/__init__.py" "$TMP/use.log" || fail "imported another package: $(grep package "$TMP/use.log")"
grep -q "^library $PKG/rediloco/libdiloco.so.0" "$TMP/use.log" || fail "loaded another library: $(grep library "$TMP/use.log")"
grep -q "^synced to version 1" "$TMP/use.log" || fail "no sync: $(cat "$TMP/use.log")"
v=$(sed -n 's/^#define DILOCO_VERSION_STRING "\(.*\)"/\1/p' worker/diloco.h)
grep -q "^version 0.1.0 $v" "$TMP/use.log" || fail "versions: $(grep '^version' "$TMP/use.log"), want 0.1.0 $v"
make -s uninstall-python PREFIX="$TMP/prefix" > /dev/null || fail "uninstall-python"
[ ! -e "$PKG/rediloco" ] || fail "uninstall-python left $PKG/rediloco"
say "installed package works from outside the tree (libdiloco $v), synced a round; uninstalled"
