#!/bin/sh
# it_python_bad_input.sh: a PyTorch worker with bad input gets one clear Python exception each, never a
# crash of the interpreter, and the run is untouched (tests/python/bad_input.py): a model of the wrong
# size, an fp64 parameter, an unknown run, a dead Redis, a URL that is not Redis's, URLs with a password (mistyped,
# an '@' or a '/' in it: the password never in the message), an outer optimizer,
# sync_every 0, a sync or request timeout of 0 or less, fragments_in_flight 0 or more than the run's fragments,
# a net_timeout under a millisecond, sync_every=True, a string for a number, max_sync_retries -1, a worker id
# with a space, a heartbeat longer than the run's timeout allows (in DiLoCo's argument names, not the C flags),
# a wrong fragment_sync_delay (refused before registering), a run shut down (no Lua error code in the message);
# arguments of the wrong kind (model "x" or a list, inner_optimizer None or a class, url
# None, run 7) get a TypeError before Redis is touched. NaN in the parameters at a sync is not sent:
# libdiloco logs it (through the package's log callback) and resets the worker to the global
# parameters, as it does for a C worker. Afterwards
# the run is still at version 0 with no worker left registered, and a good worker syncs round 0. In a run
# that weighs pseudo-gradients by tokens, a worker that reports none (report(loss) without tokens=) is told
# once that each of its pseudo-gradients counts as 1 token.
. "$(dirname "$0")/lib.sh"
RUN=pybad; NUMEL=5000
start_redis
init_run $RUN --trainer quadratic --numel $NUMEL --shards 2 --workers 1
start_server s1
init_run pyshut --trainer quadratic --numel $NUMEL --shards 1 --workers 1
bin/coordinator control --redis "$URL" --run pyshut shutdown > /dev/null || fail "coordinator control shutdown"
dead="redis://127.0.0.1:$(free_port)"
$PYTHON tests/python/bad_input.py "$URL" $RUN $NUMEL "$dead" pyshut > "$TMP/bad.log" 2>&1 \
  || fail "bad_input.py: $(grep -v '^ok' "$TMP/bad.log" | tail -n 20)"
cat "$TMP/bad.log" | grep '^ok' | cut -c1-200
n=$(grep -c '^ok' "$TMP/bad.log")
[ "$n" -eq 31 ] || fail "expected 31 ok lines, got $n"
[ "$(shard_versions $RUN)" = "1 1" ] || fail "shard versions $(shard_versions $RUN), want 1 1 (only the good worker's round)"
[ "$($RCLI HLEN "dl:{$RUN}:workers")" -eq 0 ] || fail "workers left registered: $($RCLI HKEYS "dl:{$RUN}:workers")"
$RCLI XRANGE "dl:{$RUN}:events" - + | grep -q '^bad$' && fail "worker 'bad' reached the run's events: $($RCLI XRANGE "dl:{$RUN}:events" - + | tr '\n' ' ' | grep -o '.\{0,80\}bad.\{0,80\}' | head -n 3)"
say "every bad input refused with a clear exception; the run took only the good worker's round"

RUN=pytok
init_run $RUN --trainer quadratic --numel $NUMEL --shards 2 --workers 1 --weight-by tokens
start_server t1
$PYTHON - "$URL" $RUN $NUMEL > "$TMP/tok.log" 2>&1 <<'PY' || fail "a worker without tokens: $(tail -n 20 "$TMP/tok.log")"
import sys
import torch
sys.path.insert(0, "python")
import rediloco
url, run, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
m = torch.nn.Module()
m.x = torch.nn.Parameter(torch.zeros(n))
inner = torch.optim.SGD(m.parameters(), lr=0.01)
msgs = []
with rediloco.DiLoCo(url, run, m, inner, sync_every=2, worker_id="notok", heartbeat_interval=1,
                     log=lambda level, msg: msgs.append(msg)) as dl:
    for _ in range(4):
        m.x.grad = torch.ones(n)
        inner.step()
        dl.report(0.5)
    assert dl.last_sync is not None and dl.last_sync.version == 2, dl.last_sync
print("\n".join(msgs))
PY
grep -q "weighs pseudo-gradients by tokens (--weight-by tokens), but this worker has reported none .*DiLoCo.report(loss, tokens=N)" "$TMP/tok.log" ||
  fail "no warning of a worker that reports no tokens: $(cat "$TMP/tok.log")"
[ "$(grep -c 'has reported none' "$TMP/tok.log")" = 1 ] || fail "the missing tokens were said more than once: $(cat "$TMP/tok.log")"
say "a worker reporting no tokens to a --weight-by tokens run: told once, and it syncs"

# what a new user does (tests/python/misuse.py): an LR scheduler made before or inside the session, the model
# moved (model.double()) inside it, a second session on the same model, NaN with AdamW (its state is reset
# with the parameters), flat_params before open, where BuffersNotSynced points, load_checkpoint of tied weights
# and of a DDP model
RUN=pymisuse
init_run $RUN --trainer quadratic --numel $NUMEL --shards 1 --workers 1
start_server m1
$PYTHON tests/python/misuse.py "$URL" $RUN $NUMEL > "$TMP/misuse.log" 2>&1 || fail "misuse.py: $(cat "$TMP/misuse.log")"
grep "^ok" "$TMP/misuse.log" | cut -c1-200
say "a scheduler either side of the session, a moved model, a second session, NaN with AdamW, tied and DDP checkpoints"
