#!/bin/sh
# it_python_pip.sh: `pip install ./python` makes a working package, offline, with Debian's pip and
# setuptools, in a venv made with --system-site-packages (so Debian's torch is seen):
#   - from a built tree: the tree's build/libdiloco.so is bundled into the package and loaded from there;
#   - from a tree without a build: the package uses the libdiloco that `make install PREFIX=...` put in
#     place (found through pkg-config at install time);
#   each time a script run from another folder imports the installed package (not the tree's) and a
#   short real worker syncs rounds with a real redis-server and shard-server, then stops cleanly on
#   DiLoCo.stop() (rediloco.Stopped is an Exception, swallowed by the with block);
#   - the installed package carries py.typed, its public API is fully type-hinted, and every exception
#     raised while handling another names its cause (`raise ... from`).
. "$(dirname "$0")/lib.sh"
$PYTHON -c 'import setuptools, wheel, venv, pip' 2>/dev/null \
  || { echo "SKIP: Debian's python3-venv, python3-pip, python3-setuptools or python3-wheel is missing (make deps)"; exit 77; }
[ -f build/libdiloco.so ] || fail "build/libdiloco.so missing: run make"
ROOT=$PWD
start_redis
RUN=pip
init_run $RUN --trainer quadratic --numel 3000 --shards 2 --workers 1
start_server s1

cat > "$TMP/use.py" <<'PY'
import sys
import torch
import rediloco
from rediloco import _lib
print("package", rediloco.__file__)
print("library", _lib.load().path)
print("stopped is exception", issubclass(rediloco.Stopped, Exception) and not issubclass(rediloco.Stopped, KeyboardInterrupt))
m = torch.nn.Module()
m.x = torch.nn.Parameter(torch.zeros(3000))
opt = torch.optim.SGD(m.parameters(), lr=0.1)
with rediloco.DiLoCo(sys.argv[1], sys.argv[2], m, opt, sync_every=2, worker_id=sys.argv[3], connect_timeout=5) as dl:
    for step in range(100):
        m.x.grad = torch.ones(3000)
        opt.step()
        if step == 3:
            print("synced to version", dl.last_sync.version)
            dl.stop("enough")
    print("not stopped")
print("after the block, stopping", dl.stopping)
PY

# pip_install NAME TREE: a venv $TMP/NAME with the package of TREE/python installed, offline, by Debian's
# pip (`pip --python VENV`: the same pip a venv gets, without the 28 s that seeding each venv with it costs)
pip_install() {
  $PYTHON -m venv --system-site-packages --without-pip "$TMP/$1" > "$TMP/$1.venv.log" 2>&1 \
    || fail "venv: $(cat "$TMP/$1.venv.log")"
  (cd "$TMP" && $PYTHON -m pip --python "$TMP/$1/bin/python" install --no-index --no-build-isolation "$2/python") \
    > "$TMP/$1.pip.log" 2>&1 \
    || fail "pip install $2/python: $(tail -20 "$TMP/$1.pip.log")"
}
# run_worker NAME WORKER_ID: the venv's python runs use.py from outside any tree; checks what it loaded
run_worker() {
  site=$("$TMP/$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
  (cd "$TMP" && env -u PYTHONPATH -u REDILOCO_LIB "$TMP/$1/bin/python" use.py "$URL" $RUN "$2") > "$TMP/$1.use.log" 2>&1 \
    || fail "$1: the installed package: $(cat "$TMP/$1.use.log")"
  grep -q "^package $site/rediloco/__init__.py" "$TMP/$1.use.log" || fail "$1: imported another package: $(grep package "$TMP/$1.use.log")"
  grep -q "^stopped is exception True" "$TMP/$1.use.log" || fail "$1: Stopped: $(cat "$TMP/$1.use.log")"
  grep -q "^synced to version [1-9]" "$TMP/$1.use.log" || fail "$1: no sync: $(cat "$TMP/$1.use.log")"
  grep -q "^after the block, stopping True" "$TMP/$1.use.log" && ! grep -q "not stopped" "$TMP/$1.use.log" \
    || fail "$1: the stop did not end the block: $(cat "$TMP/$1.use.log")"
  [ -f "$site/rediloco/py.typed" ] || fail "$1: py.typed not installed"
}

# 1. a built tree (a private copy of python/ with the tree's build/ beside it, so nothing is written here)
mkdir -p "$TMP/built"; cp -r python "$TMP/built/python"; ln -s "$ROOT/build" "$TMP/built/build"
rm -rf "$TMP/built/python/build" "$TMP/built/python"/*.egg-info
pip_install venv1 "$TMP/built"
run_worker venv1 w1
grep -q "^library $site/rediloco/libdiloco.so.0" "$TMP/venv1.use.log" || fail "built tree: loaded another library: $(grep library "$TMP/venv1.use.log")"

# 2. a tree without a build, and libdiloco from `make install`
make -s install PREFIX="$TMP/prefix" > "$TMP/install.log" 2>&1 || fail "make install: $(cat "$TMP/install.log")"
mkdir -p "$TMP/bare"; cp -r python "$TMP/bare/python"; rm -rf "$TMP/bare/python/build" "$TMP/bare/python"/*.egg-info
PKG_CONFIG_PATH="$TMP/prefix/lib/pkgconfig" pip_install venv2 "$TMP/bare"
run_worker venv2 w2
grep -q "^library $TMP/prefix/lib/libdiloco.so.0" "$TMP/venv2.use.log" || fail "make install: loaded another library: $(grep library "$TMP/venv2.use.log")"
[ ! -e "$site/rediloco/libdiloco.so.0" ] || fail "a bare tree bundled a library"

# 3. type hints on the public API, and `raise ... from` inside every except block
"$TMP/venv1/bin/python" "$ROOT/tests/python/package_hygiene.py" "$ROOT/python/rediloco" > "$TMP/hygiene.log" 2>&1 \
  || fail "package hygiene: $(cat "$TMP/hygiene.log")"
say "pip install ./python offline: bundled build/libdiloco.so and make-install's libdiloco both load and sync; $(tail -1 "$TMP/hygiene.log")"
