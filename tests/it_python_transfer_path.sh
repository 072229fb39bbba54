#!/bin/sh
# it_python_transfer_path.sh: which way the package moves a model's parameters (rediloco.transfer_path,
# devicehooks.py), checked without a GPU:
#   - a CPU model: "cpu", and a real session on it (a run, a shard-server, one sync) says "cpu" too;
#   - a model on torch's "meta" device (off the CPU, not CUDA): "pinned host copy";
#   - a CUDA device with build/libdiloco_cuda.so loadable: "device hooks"; with REDILOCO_CUDA_LIB=""
#     (no library): "pinned host copy", and cuda_library_status says why;
#   - no parameters, or parameters on two devices: DiLoCoError.
# The CUDA paths themselves need a GPU: tests/it_cuda_python_hooks.sh (skipped here).
. "$(dirname "$0")/lib.sh"
need_torch
start_redis
RUN=tp
init_run $RUN --trainer quadratic --numel 1000 --shards 2 --workers 1
start_server s1
cat > "$TMP/paths.py" <<'PY'
import os
import sys
import torch
sys.path.insert(0, "python")
import rediloco
from rediloco import devicehooks

cpu = torch.nn.Linear(4, 3)
assert rediloco.transfer_path(cpu) == "cpu"
meta = torch.nn.Linear(4, 3, device="meta")
assert rediloco.transfer_path(meta) == "pinned host copy", rediloco.transfer_path(meta)
cuda = devicehooks.path_for_device(torch.device("cuda", 0))
print("cuda:", cuda, "|", devicehooks.cuda_library_status())
for bad in (torch.nn.Module(), torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2, device="meta"))):
    try:
        rediloco.transfer_path(bad)
        raise SystemExit("no error for %r" % bad)
    except rediloco.DiLoCoError as e:
        print("error:", e)
if len(sys.argv) > 1:
    m = torch.nn.Module()
    m.x = torch.nn.Parameter(torch.zeros(1000))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with rediloco.DiLoCo(sys.argv[1], sys.argv[2], m, opt, sync_every=2, worker_id="tp", connect_timeout=5) as dl:
        for _ in range(2):
            m.x.grad = torch.ones(1000)
            opt.step()
        print("session:", dl.transfer_path, "version", dl.last_sync.version)
PY
$PYTHON "$TMP/paths.py" "$URL" $RUN > "$TMP/with.log" 2>&1 || fail "with the library: $(cat "$TMP/with.log")"
if [ -f build/libdiloco_cuda.so ]; then
  grep -q "^cuda: device hooks | .*build/libdiloco_cuda.so$" "$TMP/with.log" || fail "with the library: $(cat "$TMP/with.log")"
else  # built without nvcc
  grep -q "^cuda: pinned host copy | libdiloco_cuda.so not found" "$TMP/with.log" || fail "no library: $(cat "$TMP/with.log")"
fi
grep -q "^session: cpu version 1$" "$TMP/with.log" || fail "CPU session: $(cat "$TMP/with.log")"
[ "$(grep -c '^error: the model' "$TMP/with.log")" -eq 2 ] || fail "bad models: $(cat "$TMP/with.log")"
REDILOCO_CUDA_LIB= $PYTHON "$TMP/paths.py" > "$TMP/without.log" 2>&1 || fail "without: $(cat "$TMP/without.log")"
grep -q '^cuda: pinned host copy | libdiloco_cuda.so not found' "$TMP/without.log" || fail "without: $(cat "$TMP/without.log")"
say "cpu, meta -> pinned host copy, cuda -> device hooks (pinned host copy without the library); CPU session synced"
