#!/usr/bin/python3
"""bad_input.py URL RUN NUMEL DEAD_URL SHUT_RUN: every bad input a PyTorch worker can bring raises one clear
exception with the library's message, the interpreter carries on, and nothing reaches the run; then a
good worker still syncs one round. Arguments of the wrong kind (model "x" or a list, inner_optimizer None,
url None) raise TypeError with a sentence before Redis is asked anything. Prints one "ok <case>: <message>" line per case; exits 1 on the first
case that does not behave."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import rediloco  # noqa: E402

URL, RUN, NUMEL, DEAD, SHUT = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]


def model_of(n, dtype=torch.float32):
    m = torch.nn.Module()
    m.x = torch.nn.Parameter(torch.zeros(n, dtype=dtype))
    return m


def expect(case, exc_type, words, fn, absent=()):
    """fn() raises exc_type, whose message says every one of words and none of absent."""
    try:
        fn()
    except exc_type as e:
        msg = str(e)
        missing = [w for w in words if w not in msg]
        if missing:
            print("FAIL %s: message lacks %s: %s" % (case, missing, msg))
            sys.exit(1)
        there = [w for w in absent if w in msg]
        if there:
            print("FAIL %s: message says %s: %s" % (case, there, msg))
            sys.exit(1)
        print("ok %s: %s" % (case, msg))
        return
    except Exception as e:  # noqa: BLE001 - the wrong kind of exception is the failure reported
        print("FAIL %s: raised %s: %s" % (case, type(e).__name__, e))
        sys.exit(1)
    print("FAIL %s: no exception" % case)
    sys.exit(1)


def join(model, url=URL, run=RUN, inner="sgd", **kw):
    if inner == "sgd":
        inner = torch.optim.SGD(model.parameters(), lr=0.1)
    kw.setdefault("connect_timeout", 0)
    with rediloco.DiLoCo(url, run, model, inner, sync_every=2, worker_id="bad", **kw):
        pass


def sgd():
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)


expect("wrong parameter count", rediloco.DiLoCoError, [str(NUMEL), str(NUMEL + 1)], lambda: join(model_of(NUMEL + 1)))
expect("fp64 parameter", rediloco.DiLoCoError, ["'x'", "float64", "fp32"], lambda: join(model_of(NUMEL, torch.float64)))
expect("unknown run", rediloco.DiLoCoError, ["no-such-run"], lambda: join(model_of(NUMEL), run="no-such-run"))
expect("dead Redis", rediloco.DiLoCoError, [DEAD.split("//")[1]], lambda: join(model_of(NUMEL), url=DEAD))
expect("bad URL", rediloco.DiLoCoError, ["http://"], lambda: join(model_of(NUMEL), url="http://127.0.0.1:1"))
# a URL with a password is never quoted with it: a mistyped scheme (was quoted whole, twice), a password with an '@'
# (the message's own redaction split at its first '@') or an unencoded '/' (its first characters quoted as a port)
_dead_host = DEAD.split("//")[1]
for _case, _url in (("mistyped scheme", "redis:/alice:s3cretPW@" + _dead_host),
                    ("'@' in the password", "redis://alice:p@s3cretPW@" + _dead_host),
                    ("'/' in the password", "redis://alice:pa/s3cretPW@" + _dead_host)):
    expect("password hidden, " + _case, rediloco.DiLoCoError, ["cannot join run"],
           lambda: join(model_of(NUMEL), url=_url, connect_timeout=0), absent=["s3cret", "pa/", "'pa'"])
expect("zero sync timeout", ValueError, ["sync_timeout", "at least 0.001"], lambda: join(model_of(NUMEL), sync_timeout=0))
# a Python user's names and bounds, checked before Redis is asked anything (rounded to 0 ms, 0.0001 was "> 0, got
# 0.0001"; True passed for H=1; a string gave a raw TypeError; -1 retries named diloco_options' field)
expect("net timeout under a millisecond", ValueError, ["net_timeout", "at least 0.001", "0.0001"],
       lambda: join(model_of(NUMEL), net_timeout=0.0001))
expect("sync_every a bool", ValueError, ["sync_every", "True"], lambda: rediloco.DiLoCo(URL, RUN, model_of(NUMEL), sgd(), sync_every=True))
expect("heartbeat_interval a string", TypeError, ["heartbeat_interval", "str '30'"],
       lambda: join(model_of(NUMEL), heartbeat_interval="30"))
expect("fragment_update_alpha a string", TypeError, ["fragment_update_alpha", "str '0.5'"],
       lambda: join(model_of(NUMEL), fragment_update_alpha="0.5"))
expect("negative max_sync_retries", ValueError, ["max_sync_retries", ">= 0"],
       lambda: join(model_of(NUMEL), max_sync_retries=-1), absent=["diloco_options"])
expect("worker id with a space", ValueError, ["worker_id", "'a b'"],
       lambda: rediloco.DiLoCo(URL, RUN, model_of(NUMEL), sgd(), worker_id="a b"), absent=["BADARG"])
# the run's heartbeat timeout is 120 s: libdiloco refuses a beat every 200 s, in DiLoCo's words
expect("heartbeat_interval above the run's timeout", rediloco.DiLoCoError, ["heartbeat_interval 200 s"],
       lambda: join(model_of(NUMEL), heartbeat_interval=200), absent=["--heartbeat-interval", "diloco_options"])
# a fragment_sync_delay that is not the run's is refused before the worker registers (the run has 1 fragment: 0)
expect("wrong fragment_sync_delay", ValueError, ["fragment_sync_delay=5", "leave it None"],
       lambda: join(model_of(NUMEL), fragment_sync_delay=5))
# a run shut down by its operator: Lua's SHUTDOWN code is not part of the message
expect("a run shut down", rediloco.DiLoCoError, ["the run has been shut down"],
       lambda: join(model_of(NUMEL), run=SHUT), absent=["SHUTDOWN"])
expect("negative net timeout", ValueError, ["net_timeout"], lambda: join(model_of(NUMEL), net_timeout=-1))
expect("outer optimizer", TypeError, ["shard-servers"],
       lambda: rediloco.DiLoCo(URL, RUN, model_of(NUMEL), sgd(), outer_optimizer=torch.optim.SGD([torch.zeros(1)], lr=1)))
expect("bad sync_every", ValueError, ["sync_every"], lambda: rediloco.DiLoCo(URL, RUN, model_of(NUMEL), sgd(), sync_every=0))
expect("no fragment in flight", ValueError, ["fragments_in_flight", "positive"],
       lambda: rediloco.DiLoCo(URL, RUN, model_of(NUMEL), sgd(), fragments_in_flight=0))
expect("more in flight than fragments", rediloco.DiLoCoError, ["fragments_in_flight", "at most that many"],
       lambda: join(model_of(NUMEL), fragments_in_flight=2))
# arguments of the wrong kind: a TypeError with a sentence from the constructor, before Redis is asked anything
expect("model a string", TypeError, ["model must be a torch.nn.Module", "str 'x'"], lambda: join("x", inner=sgd()))
expect("model a list", TypeError, ["model must be a torch.nn.Module", "list"], lambda: join([model_of(NUMEL)], inner=sgd()))
expect("no inner optimizer", TypeError, ["inner_optimizer must be the optimizer", "NoneType"],
       lambda: join(model_of(NUMEL), inner=None))
expect("an optimizer class", TypeError, ["inner_optimizer must be the optimizer"],
       lambda: join(model_of(NUMEL), inner=torch.optim.SGD))
expect("no URL", TypeError, ["url must be a string", "NoneType"], lambda: join(model_of(NUMEL), url=None))
expect("run not a string", TypeError, ["run must be a string", "int 7"], lambda: join(model_of(NUMEL), run=7))


def diverge():
    """NaN at a sync: libdiloco refuses to send it, logs why and resets the worker to the global values."""
    m = model_of(NUMEL)
    inner = torch.optim.SGD(m.parameters(), lr=0.1)
    logged = []
    with rediloco.DiLoCo(URL, RUN, m, inner, sync_every=2, worker_id="nan", heartbeat_interval=1,
                         log=lambda level, msg: logged.append((level, msg))) as dl:
        start = m.x.detach().clone()
        for step in range(2):
            m.x.grad = torch.zeros(NUMEL)
            if step == 1:
                m.x.grad[NUMEL - 3] = float("nan")
            inner.step()
            dl.report(0.0, tokens=1)
        errors = [msg for level, msg in logged if level == 3]
        info = dl.last_sync
        if not torch.equal(m.x.detach(), start) or info is None or not info.stale or info.version != 0:
            raise rediloco.DiLoCoError("parameters not reset to the global ones of version 0: %s" % (info,))
        if not errors:
            raise rediloco.DiLoCoError("no ERROR reached the log callback: %s" % logged)
        raise rediloco.DiLoCoError("reset to the global parameters; the log says: " + errors[-1])


expect("NaN in the parameters", rediloco.DiLoCoError, ["reset to the global", "not finite at index %d" % (NUMEL - 3)],
       diverge)

# nothing reached the run, and a good worker syncs one round
m = model_of(NUMEL)
inner = torch.optim.SGD(m.parameters(), lr=0.01)
with rediloco.DiLoCo(URL, RUN, m, inner, sync_every=2, worker_id="good", heartbeat_interval=1) as dl:
    v0 = dl.version
    for _ in range(2):
        m.x.grad = torch.ones(NUMEL)
        inner.step()
    info = dl.last_sync
    if v0 != 0 or info is None or info.version != 1:
        print("FAIL good worker: started at version %s, last sync %s" % (v0, info))
        sys.exit(1)
print("ok good worker after the bad ones: version 0 -> %d, digest %s" % (info.version, info.digest))
