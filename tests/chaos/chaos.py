#!/usr/bin/env python3
"""chaos.py: the ReDiLoCo chaos harness (engine of tests/chaos/chaos.sh; see docs/chaos.md).

Starts Redis (optionally with AOF, appendfsync always), coordinator init, N shard-servers and M
workers, supervises them like systemd (a process that dies is restarted after --restart-delay with
the same arguments: same --worker-id, same server --id), and injects faults on a seeded schedule
(fixed interval or Poisson):

  kill:worker  kill:server  kill:coordinator  kill:redis   SIGKILL; the supervisor restarts it
  stop:worker  stop:server  stop:coordinator             SIGSTOP, SIGCONT after a bounded time
  kill:redis-master  stop:redis-master   (--redis-ha: master + 2 replicas + 3 Sentinels, redis_ha.py) the
                  node that is master now; Sentinel promotes a replica, the node comes back as a replica
  cut:worker      (workers in their own network namespace, --netns-workers) every packet dropped both
                  ways on the worker's veth pair (tc pfifo limit 0, or netem loss 100%, or link down:
                  --cut-method), healed after a bound

With --group-ranks R worker w1 is a process group of R ranks (tests/tools/group_worker), one worker of
the run as a multi-GPU node is.

Every fault, restart, resume and heal goes to OUT/chaos.jsonl with a wall-clock timestamp "t", plus a
"sample" line per second (live workers / servers / members). After the storm the harness resumes and
heals everything, waits until every worker has synced a few more rounds (the settle phase: a run that
does not settle is reported, it is a hang), dumps the run's Redis state (events stream, barriers,
shards, workers, state) to OUT/redis_dump.json, shuts the run down and writes OUT/summary.json.

Traffic stays on 127.0.0.1 and, with --netns-workers, inside namespaces and veth pairs this harness
creates (10.213.x.0/30). Everything is bounded in time; everything is cleaned up on exit, SIGINT and
SIGTERM (children also get PR_SET_PDEATHSIG=SIGKILL, so even a SIGKILL of the harness frees them).
Only the Python standard library is used.
"""
import argparse
import ctypes
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from redis_ha import RedisHA  # noqa: E402
import group_log  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, "bin")
_libc = ctypes.CDLL(None, use_errno=True)


def _child_setup():
    _libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: die with the harness
    os.setpgrp()                              # Ctrl-C goes to the harness only; it cleans up


def free_ports(n):
    """n distinct free loopback ports: every socket stays bound until all are picked (ports picked one by
    one, each closed before the next, can repeat: the 6 of a --redis-ha run did 28 times in 30000)."""
    ss = [socket.socket() for _ in range(n)]
    for s in ss:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in ss]
    for s in ss:
        s.close()
    return ports


def free_port():
    return free_ports(1)[0]


# ---- a minimal RESP client (no dependency on redis-py) -------------------------------------------

# Harness.dump's reads, in one script (KEYS[1] routes it; ARGV[1] = "dl:{RUN}"): the config, state, shards,
# servers and workers hashes, the events stream, then every barrier hash of every fragment, in order.
DUMP_LUA = """
local P = ARGV[1]
local function all(k) return redis.call('HGETALL', k) end
local out = {all(P .. ':config'), all(P .. ':state'), all(P .. ':shards'), all(P .. ':servers'),
             all(P .. ':workers'), redis.call('XRANGE', P .. ':events', '-', '+')}
local nfrag = tonumber(redis.call('HGET', P .. ':config', 'fragments')) or 1
for f = 0, nfrag - 1 do
    local rnd = tonumber(redis.call('HGET', P .. ':state', 'round:' .. f)) or 0
    for r = 0, rnd do out[#out + 1] = all(P .. ':f' .. f .. ':r' .. r) end
end
return out
"""

class Redis:
    def __init__(self, host, port):
        self.addr = (host, port)
        self.sock = None
        self.buf = b""

    def close(self):
        if self.sock:
            try:
                self.sock.close()
            except OSError:
                pass
        self.sock = None
        self.buf = b""

    def _line(self):
        while b"\r\n" not in self.buf:
            d = self.sock.recv(65536)
            if not d:
                raise OSError("connection closed")
            self.buf += d
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            d = self.sock.recv(65536)
            if not d:
                raise OSError("connection closed")
            self.buf += d
        v, self.buf = self.buf[:n], self.buf[n + 2:]
        return v

    def _read(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            return RuntimeError(rest.decode())
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n).decode("utf-8", "replace")
        if t in (b"*", b"%"):
            n = int(rest)
            if n < 0:
                return None
            return [self._read() for _ in range(n * (2 if t == b"%" else 1))]
        raise OSError("bad RESP reply %r" % line)

    def cmd(self, *args, timeout=2.0):
        """One command; None if Redis is unreachable (it may be down on purpose)."""
        for _ in range(2):
            try:
                if not self.sock:
                    self.sock = socket.create_connection(self.addr, timeout=timeout)
                    self.sock.settimeout(timeout)
                out = b"*%d\r\n" % len(args)
                for a in args:
                    a = str(a).encode()
                    out += b"$%d\r\n%s\r\n" % (len(a), a)
                self.sock.sendall(out)
                r = self._read()
                if isinstance(r, RuntimeError):
                    return None
                return r
            except (OSError, ValueError):
                self.close()
        return None


def pairs(lst):
    return {lst[i]: lst[i + 1] for i in range(0, len(lst or []) - 1, 2)}


# ---- supervised processes --------------------------------------------------------------------------

class Proc:
    def __init__(self, h, name, role, argv, netns=None):
        self.h, self.name, self.role, self.argv, self.netns = h, name, role, argv, netns
        self.p = None
        self.state = "new"        # running, stopped, dead
        self.restart_at = 0.0
        self.cont_at = 0.0
        self.heal_at = 0.0        # > 0 while cut
        self.died_at = 0.0
        self.starts = 0
        self.argv_fn = None       # argv computed at each start (a Redis node joins the current master)
        self.can_start = None     # a restart also waits for this to say yes (a failover to finish)
        self.log = os.path.join(h.out, "%s-%s.log" % (role, name))

    def start(self):
        argv = self.argv_fn() if self.argv_fn else self.argv
        if self.netns:
            argv = ["ip", "netns", "exec", self.netns] + argv
        with open(self.log, "a") as lf:
            lf.write("=== start %d at %.3f\n" % (self.starts + 1, time.time()))
            lf.flush()
            self.p = subprocess.Popen(argv, stdout=lf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      preexec_fn=_child_setup, cwd=ROOT)
        self.starts += 1
        self.state = "running"

    def healthy(self):
        return self.state == "running" and self.heal_at == 0.0

    def signal(self, sig):
        try:
            os.kill(self.p.pid, sig)
            return True
        except (ProcessLookupError, AttributeError):
            return False


class Harness:
    def __init__(self, a):
        self.a = a
        self.out = os.path.abspath(a.out)
        os.makedirs(self.out, exist_ok=True)
        # a new run in an old folder: remove what an earlier run left (logs are opened for appending)
        for f in os.listdir(self.out):
            if f.endswith((".jsonl", ".log", ".png")) or f in ("redis_dump.json", "summary.json", "audit.json"):
                os.remove(os.path.join(self.out, f))
        shutil.rmtree(os.path.join(self.out, "redis"), ignore_errors=True)
        self.rng = random.Random(a.seed)
        self.procs = []
        self.netns = []
        self.clog = open(os.path.join(self.out, "chaos.jsonl"), "a")
        self.faults = []
        self.redis = None
        self.svc = "127.0.0.1"
        self.tag = "dc%d" % (os.getpid() % 100000)

    # -- logging
    def log(self, event, **kw):
        rec = {"event": event, "t": round(time.time(), 3)}
        rec.update(kw)
        self.clog.write(json.dumps(rec) + "\n")
        self.clog.flush()
        if self.a.verbose and event != "sample":
            print("[chaos %s] %s" % (time.strftime("%H:%M:%S"), json.dumps(rec)), flush=True)

    def sh(self, *argv, check=True):
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=20)
        if check and r.returncode != 0:
            raise RuntimeError("%s: %s" % (" ".join(argv), r.stdout.strip()))
        return r

    # -- network namespaces
    def setup_netns(self, k):
        for i in range(1, k + 1):
            ns, host, peer = "%sw%d" % (self.tag, i), "%sh%d" % (self.tag, i), "%sp%d" % (self.tag, i)
            self.netns.append(ns)
            self.sh("ip", "netns", "add", ns)
            self.sh("ip", "link", "add", host, "type", "veth", "peer", "name", peer)
            self.sh("ip", "link", "set", peer, "netns", ns)
            self.sh("ip", "addr", "add", "10.213.%d.1/30" % i, "dev", host)
            self.sh("ip", "link", "set", host, "up")
            self.sh("ip", "-n", ns, "addr", "add", "10.213.%d.2/30" % i, "dev", peer)
            self.sh("ip", "-n", ns, "link", "set", peer, "up")
            self.sh("ip", "-n", ns, "link", "set", "lo", "up")
            self.sh("ip", "-n", ns, "route", "add", "default", "via", "10.213.%d.1" % i)
        self.svc = "10.213.1.1"  # a local address of this host, reachable from every namespace
        self.log("netns", namespaces=self.netns, service_address=self.svc)

    def cut(self, p, on):
        i = self.netns.index(p.netns) + 1
        host, peer = "%sh%d" % (self.tag, i), "%sp%d" % (self.tag, i)
        m = self.a.cut_method
        if m == "down":  # the worker's end of the link goes down: sends fail at once (ENETUNREACH)
            self.sh("ip", "-n", p.netns, "link", "set", peer, "down" if on else "up")
            if not on:
                self.sh("ip", "-n", p.netns, "route", "replace", "default", "via", "10.213.%d.1" % i)
            return
        # silent loss both ways, links stay up: netem loss 100%, or a pfifo queue of length 0 (which
        # drops every packet; works where the netem module is missing)
        q = ["netem", "loss", "100%"] if m == "netem" else ["pfifo", "limit", "0"]
        if on:
            self.sh("tc", "qdisc", "add", "dev", host, "root", *q)
            self.sh("ip", "netns", "exec", p.netns, "tc", "qdisc", "add", "dev", peer, "root", *q)
        else:
            self.sh("tc", "qdisc", "del", "dev", host, "root", check=False)
            self.sh("ip", "netns", "exec", p.netns, "tc", "qdisc", "del", "dev", peer, "root", check=False)

    # -- start-up
    def start_redis_ha(self):
        self.ha = RedisHA(self, Proc, Redis, free_ports, ROOT)
        self.ha.start()
        self.procs += self.ha.procs()
        self.rproc = self.ha
        self.redis = self.ha.client
        self.port = self.ha.ports[0]
        self.url = self.svc_url = self.ha.url

    def start_redis(self):
        a = self.a
        self.port = a.redis_port or free_port()
        rdir = os.path.join(self.out, "redis")
        os.makedirs(rdir, exist_ok=True)
        argv = [a.redis_server, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--dir", rdir,
                "--daemonize", "no"]
        if self.svc != "127.0.0.1":
            # also the host end of our veth pairs; Redis refuses non-loopback clients without a password
            # in protected mode, so it is off (only our namespaces can reach that address)
            argv[4:5] = ["127.0.0.1", self.svc]
            argv += ["--protected-mode", "no"]
        argv += ["--appendonly", "yes", "--appendfsync", "always"] if a.aof else ["--appendonly", "no"]
        r = Proc(self, "redis", "redis", argv)
        r.start()
        self.procs.append(r)
        self.rproc = r
        self.redis = Redis("127.0.0.1", self.port)
        for _ in range(100):
            if self.redis.cmd("PING") == "PONG":
                break
            time.sleep(0.05)
        else:
            raise RuntimeError("redis-server did not answer PING (see %s)" % r.log)
        self.url = "redis://127.0.0.1:%d" % self.port
        self.svc_url = "redis://%s:%d" % (self.svc, self.port)

    def start_all(self):
        a = self.a
        self.start_redis_ha() if a.redis_ha else self.start_redis()
        init = [os.path.join(BIN, "coordinator"), "init", "--redis", self.url, "--run", a.run, "--force",
                "--trainer", a.trainer, "--shards", str(a.shards), "--workers", str(a.target_workers or a.workers),
                "--heartbeat-timeout", str(a.heartbeat_timeout), "--seed", str(a.seed),
                "--snapshot-every", str(a.snapshot_every)]
        if a.trainer == "quadratic":
            init += ["--numel", str(a.numel)]
        init += a.init_arg
        r = subprocess.run(init, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
        with open(os.path.join(self.out, "init.log"), "w") as f:
            f.write(r.stdout)
        if r.returncode != 0:
            raise RuntimeError("coordinator init failed: " + r.stdout.strip())
        for i in range(1, a.servers + 1):
            argv = [os.path.join(BIN, "shard-server"), "--redis", self.url, "--run", a.run, "--id", "s%d" % i,
                    "--lease-ttl-ms", str(a.lease_ttl_ms)]
            if self.svc != "127.0.0.1":
                argv += ["--listen", "%s:0" % self.svc]
            argv += a.server_arg
            p = Proc(self, "s%d" % i, "server", argv)
            p.start()
            self.procs.append(p)
        for i in range(1, a.coordinators + 1):
            argv = [os.path.join(BIN, "coordinator"), "serve", "--redis", self.url, "--run", a.run, "--print-every", "5",
                    "--http", "127.0.0.1:0"]
            p = Proc(self, "c%d" % i, "coordinator", argv)
            p.start()
            self.procs.append(p)
        for i in range(1, a.workers + 1):
            ns = self.netns[i - 1] if i <= len(self.netns) else None
            argv = [os.path.join(BIN, "worker"), "--redis", self.svc_url if ns else self.url, "--run", a.run,
                    "--worker-id", "w%d" % i, "--quiet", "--log", os.path.join(self.out, "w%d.jsonl" % i),
                    "--sync-every", str(a.sync_every), "--steps", str(a.steps),
                    "--heartbeat-interval", str(a.heartbeat_interval), "--sync-timeout", str(a.sync_timeout)]
            if a.trainer == "quadratic":
                argv += ["--step-delay-ms", str(a.step_delay_ms)]
            argv += a.worker_arg
            if i == 1 and a.group_ranks > 1:
                argv = self.group_argv(ns)
            p = Proc(self, "w%d" % i, "worker", argv, netns=ns)
            p.start()
            self.procs.append(p)
        self.log("start", run=a.run, redis_port=self.port, aof=a.aof, workers=a.workers, servers=a.servers,
                 coordinators=a.coordinators,
                 netns_workers=len(self.netns), trainer=a.trainer, numel=a.numel, shards=a.shards,
                 sync_every=a.sync_every, seed=a.seed,
                 pids={p.name: p.p.pid for p in self.procs})

    def group_argv(self, ns):
        """--group-ranks R: w1 is a process group of R ranks (tests/tools/group_worker: threads of one
        process, the quadratic trainer of its id on every rank, so the group is w1 to the reference); its
        sync lines ("sync rank r version v ...") go to its log."""
        a = self.a
        url = self.svc_url if ns else self.url
        return [os.path.join(ROOT, "build", "tests", "tools", "group_worker"), "--redis", url, "--run", a.run,
                "--worker-id", "w1", "--ranks", str(a.group_ranks), "--steps", str(a.steps),
                "--sync-every", str(a.sync_every), "--heartbeat-ms", str(int(float(a.heartbeat_interval) * 1000)),
                "--sync-timeout-ms", str(int(float(a.sync_timeout) * 1000)), "--step-delay-ms", str(a.step_delay_ms)] + \
            a.group_arg

    # -- the supervisor (systemd-like restarts, resumes, heals)
    def supervise(self, now, restarting=True):
        for p in self.procs:
            if p.state in ("running", "stopped") and p.p.poll() is not None:
                rc = p.p.returncode
                if rc == 0 and p.role == "worker":  # Restart=on-failure: a worker that finished its steps is done
                    p.state = "done"
                    self.log("done", target=p.name, role=p.role, pid=p.p.pid)
                    continue
                p.state, p.died_at = "dead", now
                p.restart_at = now + (self.a.redis_down if p.role == "redis" else self.a.restart_delay)
                self.log("exit", target=p.name, role=p.role, pid=p.p.pid, rc=rc)
            if p.state == "dead" and restarting and now >= p.restart_at and (p.can_start is None or p.can_start()):
                p.start()
                self.log("restart", target=p.name, role=p.role, pid=p.p.pid, down_seconds=round(now - p.died_at, 3),
                         start=p.starts)
            if p.state == "stopped" and now >= p.cont_at:
                p.signal(signal.SIGCONT)
                p.state = "running"
                self.log("cont", target=p.name, role=p.role, pid=p.p.pid)
            if p.heal_at and now >= p.heal_at:
                # packets may flow from any moment between `begun` and `t` (the two tc/ip commands take
                # tens of ms on a busy machine): a worker can register again before `t`
                begun = time.time()
                self.cut(p, False)
                p.heal_at = 0.0
                self.log("heal", target=p.name, role=p.role, begun=round(begun, 3))

    def eligible(self, kind, role):
        ps = [p for p in self.procs if p.role == role and p.state != "done"]
        if role == "worker" and kind == "cut":
            ps = [p for p in ps if p.netns]
        if role == "redis-master":
            return self.ha.eligible_master() if self.a.redis_ha else []
        faulted = [p for p in ps if not p.healthy()]
        limit = {"worker": self.a.max_down_workers, "server": self.a.max_down_servers, "redis": 1,
                 "coordinator": 1, "sentinel": 1}[role]
        if role != "redis" and not self.rproc.healthy():
            return []
        if len(faulted) >= limit:
            return []
        return [p for p in ps if p.healthy()]

    def inject(self, now):
        if self.a.fault_plan:
            kind, role = self.a.fault_plan.split(",")[len(self.faults)].split(":")
            cands = self.eligible(kind, role)
            if not cands:
                self.log("fault_skipped", reason="no eligible target for the planned %s:%s" % (kind, role))
                return False
            return self.do_fault(now, kind, role, self.rng.choice(cands))
        menu = []
        for item in self.a.faults.split(","):
            k, w = item.split("=") if "=" in item else (item, "1")
            kind, role = k.split(":")
            if float(w) > 0 and (kind != "kill" or role != "redis" or self.a.aof):
                menu.append((kind, role, float(w)))
        for _ in range(10):
            kind, role, _w = self.rng.choices(menu, weights=[m[2] for m in menu])[0]
            cands = self.eligible(kind, role)
            if cands:
                break
        else:
            self.log("fault_skipped", reason="no eligible target")
            return
        return self.do_fault(now, kind, role, self.rng.choice(cands))

    def do_fault(self, now, kind, role, p):
        rec = {"kind": kind, "target": p.name, "role": role, "pid": p.p.pid}
        if kind == "kill":
            p.signal(signal.SIGKILL)
        elif kind == "stop":
            d = self.rng.uniform(self.a.stop_min, self.a.stop_max)
            p.signal(signal.SIGSTOP)
            p.state, p.cont_at = "stopped", now + d
            rec["seconds"] = round(d, 3)
        elif kind == "cut":
            d = self.rng.uniform(self.a.cut_min, self.a.cut_max)
            self.cut(p, True)
            p.heal_at = now + d
            rec["seconds"] = round(d, 3)
        self.faults.append(rec)
        self.log("fault", **rec)
        return True

    def sample(self):
        w = [p for p in self.procs if p.role == "worker"]
        s = [p for p in self.procs if p.role == "server"]
        members = self.redis.cmd("HLEN", "dl:{%s}:workers" % self.a.run, timeout=0.5)
        rnd = self.redis.cmd("HGET", "dl:{%s}:state" % self.a.run, "round:0", timeout=0.5)
        self.log("sample", live_workers=sum(p.healthy() for p in w), live_servers=sum(p.healthy() for p in s),
                 redis=self.rproc.healthy(), members=members, round=int(rnd) if rnd else None)

    def sample_beats(self):
        """--sample-beats: each worker's last heartbeat (its dl:{R}:heartbeats score, ms) as Redis has it
        now, so a test can tell when the first beat after a failover reached the new master."""
        r = self.redis.cmd("ZRANGE", "dl:{%s}:heartbeats" % self.a.run, "0", "-1", "WITHSCORES", timeout=0.3)
        if isinstance(r, list):
            self.log("beats", scores={r[i]: float(r[i + 1]) for i in range(0, len(r) - 1, 2)})

    def version_now(self):
        """Fragment 0's version now: its open round (sync), or shard 0's version (async: no round opens, every
        submission applied is a version, so a worker that synced at or past version_now() + k synced after
        now). Both are written at init, so no answer means Redis is unreachable for now (a master killed in the
        storm's last seconds, not failed over yet): asked again for up to 30 s, as a 0 would settle at once."""
        deadline = time.time() + 30
        while True:
            mode = self.redis.cmd("HGET", "dl:{%s}:config" % self.a.run, "mode")
            if mode == "async":
                v = self.redis.cmd("HGET", "dl:{%s}:shards" % self.a.run, "0:version")
            else:
                v = self.redis.cmd("HGET", "dl:{%s}:state" % self.a.run, "round:0")
            if (mode is not None and v is not None) or time.time() >= deadline:
                return int(v) if v else 0
            self.supervise(time.time())
            time.sleep(0.2)

    def last_syncs(self):
        """worker -> (last synced version, time) from its telemetry (a group's: rank 0's sync lines)."""
        out = {}
        for p in self.procs:
            if p.role != "worker":
                continue
            v, t = -1, 0.0
            if p.name == "w1" and self.a.group_ranks > 1:
                try:
                    syncs = [e for e in group_log.telemetry(self.out) if e["event"] == "sync"]
                except (OSError, ValueError, IndexError):  # (a line still being written)
                    syncs = []
                last = max(syncs, key=lambda e: e["version"], default=None)
                out[p.name] = (last["version"], last["t"]) if last else (v, t)
                continue
            try:
                with open(os.path.join(self.out, p.name + ".jsonl")) as f:
                    for line in f:
                        if '"sync"' in line:
                            try:
                                e = json.loads(line)
                            except ValueError:
                                continue
                            if e.get("version", -1) >= v:
                                v, t = e["version"], e["t"]
            except OSError:
                pass
            out[p.name] = (v, t)
        return out

    def run(self):
        a = self.a
        if a.netns_workers:
            self.setup_netns(a.netns_workers)
        self.start_all()
        t0 = time.time()
        # warm-up: let every worker sync once before the first fault
        warm_end = t0 + a.warmup
        while time.time() < warm_end:
            self.supervise(time.time())
            if all(v >= 1 for v, _ in self.last_syncs().values()) and time.time() - t0 >= min(a.warmup, 2):
                break
            time.sleep(0.1)
        self.log("storm_begin", duration=a.duration, fault_every=a.fault_every, schedule=a.schedule)
        start = time.time()
        end = start + a.duration
        nxt = start + (a.fault_every if a.schedule == "fixed" else self.rng.expovariate(1.0 / a.fault_every))
        last_sample = last_beats = 0.0
        while time.time() < end:
            now = time.time()
            if all(p.state == "done" for p in self.procs if p.role == "worker"):
                self.log("all_workers_done")
                break
            self.supervise(now)
            if now >= nxt and len(self.faults) < a.max_faults:
                if self.inject(now) is False:  # a planned fault waits for its target (a failover under way)
                    nxt = now + 0.2
                    continue
                nxt += a.fault_every if a.schedule == "fixed" else self.rng.expovariate(1.0 / a.fault_every)
                nxt = max(nxt, now + 0.2)
            if now - last_sample >= 1.0:
                self.sample()
                last_sample = now
            if a.sample_beats and now - last_beats >= a.sample_beats:
                self.sample_beats()
                last_beats = now
            # systemd learns of a death from SIGCHLD at once; a poll this short keeps the harness from
            # adding its own detection delay to every restart (the barrier waits for it)
            time.sleep(0.01)
        # end of the storm: resume and heal everything now, keep restarting the dead
        for p in self.procs:
            if p.state == "stopped":
                p.cont_at = 0.0
            if p.heal_at:
                p.heal_at = time.time()
        self.supervise(time.time())
        v_end = self.version_now()
        want = v_end + a.settle_rounds
        self.log("storm_end", faults=len(self.faults), round=v_end, settle_target_version=want)
        settled = False
        deadline = time.time() + a.settle_timeout
        while time.time() < deadline:
            now = time.time()
            self.supervise(now)
            if now - last_sample >= 1.0:
                self.sample()
                last_sample = now
            done = {p.name for p in self.procs if p.state == "done"}
            if all(v >= want or w in done for w, (v, _) in self.last_syncs().items()):
                settled = True
                break
            time.sleep(0.1)
        self.log("settled" if settled else "settle_timeout", target_version=want,
                 last=dict((k, v) for k, (v, _) in self.last_syncs().items()))
        if not settled and a.hold_on_hang > 0:
            self.hold(a.hold_on_hang)
        # like systemd, every process killed during the storm comes back, even if the workers finished
        # their steps before its restart was due
        back_deadline = time.time() + self.a.restart_delay + 5.0
        while any(p.state == "dead" for p in self.procs) and time.time() < back_deadline:
            self.supervise(time.time())
            time.sleep(0.05)
        self.dump()
        self.finish(settled, t0, start, end, v_end)
        return settled

    def hold(self, seconds):
        """A hang: keep every process and Redis alive for a while so they can be inspected live."""
        print("[chaos] settle timeout: holding the stuck run for %.0f s (redis-cli -p %d; pids %s)" % (
            seconds, self.port, {p.name: p.p.pid for p in self.procs if p.p}), flush=True)
        self.log("hold", seconds=seconds)
        deadline = time.time() + seconds
        while time.time() < deadline:
            time.sleep(0.5)

    def dump(self):
        # one script, so the dump is one moment of the run: the workers still train after the settle, and
        # a commit landing between a read of the shards hash and one of the events stream made the audit
        # see 'hash version 47, max commit 48'
        P = "dl:{%s}" % self.a.run
        # a Redis restarted at the storm's end may still be starting or loading its AOF (cmd: None): ask until
        # it answers (a dump taken then was empty, and the audit failed on a run with no config)
        deadline = time.time() + 15.0
        while True:
            got = self.redis.cmd("EVAL", DUMP_LUA, 1, P + ":config", P, timeout=10)
            if (isinstance(got, list) and len(got) >= 6) or time.time() > deadline:
                break
            time.sleep(0.1)
        got = got if isinstance(got, list) and len(got) >= 6 else [None] * 6
        d = {"config": pairs(got[0]), "state": pairs(got[1]), "shards": pairs(got[2]),
             "servers": list(pairs(got[3])), "members": list(pairs(got[4])), "events": [], "barriers": {}}
        for eid, fields in got[5] or []:
            e = pairs(fields)
            e["id"] = eid
            e["t"] = int(eid.split("-")[0]) / 1000.0
            d["events"].append(e)
        nfrag, i = int(d["config"].get("fragments", 1)), 6
        for f in range(nfrag):
            rnd = int(d["state"].get("round:%d" % f, 0))
            for rr in range(rnd + 1):
                b = pairs(got[i] if i < len(got) else None)
                i += 1
                d["barriers"]["%d:%d" % (f, rr)] = {k: v for k, v in b.items() if not k.startswith("a:")}
        with open(os.path.join(self.out, "redis_dump.json"), "w") as f:
            json.dump(d, f)
        self.dumped = d

    def finish(self, settled, t0, start, end, v_end):
        a, d = self.a, self.dumped
        subprocess.run([os.path.join(BIN, "coordinator"), "control", "--redis", self.url, "--run", a.run, "shutdown"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=20)
        deadline = time.time() + 10
        while time.time() < deadline and any(p.p.poll() is None for p in self.procs if p.role == "worker"):
            time.sleep(0.1)
        kinds = {}
        for f in self.faults:
            k = "%s:%s" % (f["kind"], f["role"])
            kinds[k] = kinds.get(k, 0) + 1
        restarts = {p.name: p.starts - 1 for p in self.procs if p.starts > 1}
        ev = d["events"]
        summary = {
            "run": a.run, "out": self.out, "settled": settled, "storm_seconds": round(end - start, 1),
            "faults": len(self.faults), "faults_by_kind": kinds, "restarts": restarts,
            "round_at_storm_end": v_end, "rounds_closed": int(d["state"].get("rounds_closed", 0)),
            "commits": sum(1 for e in ev if e.get("type") == "commit"),
            "evictions": sum(1 for e in ev if e.get("type") == "evicted"),
            "joins": sum(1 for e in ev if e.get("type") == "join"),
            "rejections": sum(1 for e in ev if e.get("type") == "reject"),
            "versions": [int(d["shards"].get("%d:version" % k, -1)) for k in range(int(d["config"].get("shards", 0)))],
            "last_sync_version": {k: v for k, (v, _) in self.last_syncs().items()},
        }
        with open(os.path.join(self.out, "summary.json"), "w") as f:
            json.dump(summary, f, indent=1)
        self.log("summary", **summary)
        print("chaos summary: %d faults %s in %.0f s; restarts %s; %d rounds closed, %d commits, %d evictions, "
              "%d joins; shard versions %s; settled: %s; output in %s" % (
                  len(self.faults), json.dumps(kinds), end - start, sum(restarts.values()),
                  summary["rounds_closed"], summary["commits"], summary["evictions"], summary["joins"],
                  sorted(set(summary["versions"])), settled, self.out), flush=True)

    def cleanup(self):
        for p in self.procs:
            if p.p and p.p.poll() is None:
                p.signal(signal.SIGCONT)
                p.signal(signal.SIGKILL)
        for p in self.procs:
            if p.p:
                try:
                    p.p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
        for ns in self.netns:
            subprocess.run(["ip", "netns", "del", ns], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for i in range(1, len(self.netns) + 1):  # normally gone with the namespace
            subprocess.run(["ip", "link", "del", "%sh%d" % (self.tag, i)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        if not self.a.keep_redis_dir:
            shutil.rmtree(os.path.join(self.out, "redis"), ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description="ReDiLoCo chaos harness (docs/chaos.md)")
    E = os.environ.get
    ap.add_argument("--out", default=E("CHAOS_OUT", "run/chaos"), help="output folder (logs, chaos.jsonl, dumps)")
    ap.add_argument("--run", default=E("CHAOS_RUN", "chaos"))
    ap.add_argument("--workers", type=int, default=int(E("CHAOS_WORKERS", "6")))
    ap.add_argument("--target-workers", type=int, default=0, help="coordinator init -n (default: --workers)")
    ap.add_argument("--servers", type=int, default=int(E("CHAOS_SERVERS", "3")))
    ap.add_argument("--coordinators", type=int, default=0,
                    help="coordinator serve processes (reaper + HTTP dashboard); faults kill:coordinator, stop:coordinator")
    ap.add_argument("--trainer", default=E("CHAOS_TRAINER", "quadratic"), choices=["quadratic", "gpt"])
    ap.add_argument("--numel", type=int, default=int(E("CHAOS_NUMEL", "20000")))
    ap.add_argument("--shards", type=int, default=int(E("CHAOS_SHARDS", "6")))
    ap.add_argument("--sync-every", type=int, default=int(E("CHAOS_SYNC_EVERY", "20")))
    ap.add_argument("--steps", type=int, default=0, help="worker --steps (0: until the run shuts down)")
    ap.add_argument("--step-delay-ms", type=int, default=int(E("CHAOS_STEP_DELAY_MS", "25")))
    ap.add_argument("--heartbeat-interval", default="0.5")
    ap.add_argument("--sample-beats", type=float, default=0,
                    help="seconds between 'beats' lines (every worker's last heartbeat in Redis) during the storm; 0: none")
    ap.add_argument("--heartbeat-timeout", type=float, default=float(E("CHAOS_HEARTBEAT_TIMEOUT", "3")))
    ap.add_argument("--sync-timeout", default="30")
    ap.add_argument("--lease-ttl-ms", type=int, default=1500)
    ap.add_argument("--snapshot-every", type=int, default=4)
    ap.add_argument("--aof", action="store_true", default=E("CHAOS_AOF", "") == "1",
                    help="Redis with --appendonly yes --appendfsync always (required for kill:redis)")
    ap.add_argument("--redis-port", type=int, default=0)
    ap.add_argument("--redis-server", default="redis-server")
    ap.add_argument("--redis-ha", action="store_true",
                    help="Redis as a master, 2 replicas and 3 Sentinels (redis_ha.py); URL redis+sentinel://")
    ap.add_argument("--sentinel-down-after-ms", type=int, default=2000,
                    help="--redis-ha: how long a silent master takes to be declared down")
    ap.add_argument("--fault-plan", default="",
                    help="comma list of kind:role faults injected in this order (instead of --faults)")
    ap.add_argument("--redis-down", type=float, default=1.0, help="seconds before a killed Redis restarts")
    ap.add_argument("--netns-workers", type=int, default=0, help="the first K workers get their own netns")
    ap.add_argument("--duration", type=float, default=float(E("CHAOS_DURATION", "60")), help="storm seconds")
    ap.add_argument("--warmup", type=float, default=20.0, help="max seconds for every worker to sync once")
    ap.add_argument("--fault-every", type=float, default=float(E("CHAOS_FAULT_EVERY", "3")), help="seconds (mean)")
    ap.add_argument("--schedule", default=E("CHAOS_SCHEDULE", "fixed"), choices=["fixed", "poisson"])
    ap.add_argument("--faults", default=E("CHAOS_FAULTS", "kill:worker=3,stop:worker=2,kill:server=2,stop:server=1"),
                    help="kind:role=weight,... kinds kill/stop/cut, roles worker/server/coordinator/redis")
    ap.add_argument("--max-faults", type=int, default=10000)
    ap.add_argument("--max-down-workers", type=int, default=2, help="at most this many workers faulted at once")
    ap.add_argument("--max-down-servers", type=int, default=1)
    ap.add_argument("--stop-min", type=float, default=0.5)
    ap.add_argument("--stop-max", type=float, default=5.0)
    ap.add_argument("--cut-method", default=E("CHAOS_CUT_METHOD", "pfifo"), choices=["pfifo", "netem", "down"],
                    help="network cut: tc pfifo limit 0 (drop all, default), tc netem loss 100%%, or link down")
    ap.add_argument("--cut-min", type=float, default=4.0)
    ap.add_argument("--cut-max", type=float, default=8.0)
    ap.add_argument("--restart-delay", type=float, default=0.5)
    ap.add_argument("--settle-rounds", type=int, default=3)
    ap.add_argument("--settle-timeout", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=int(E("CHAOS_SEED", "1")))
    ap.add_argument("--worker-arg", action="append", default=[], help="extra worker argument (repeatable)")
    ap.add_argument("--group-ranks", type=int, default=0,
                    help="w1 is a process group of this many ranks (tests/tools/group_worker; quadratic only)")
    ap.add_argument("--group-arg", action="append", default=[],
                    help="extra tests/tools/group_worker argument for w1 (repeatable; with --group-ranks)")
    ap.add_argument("--server-arg", action="append", default=[], help="extra shard-server argument (repeatable)")
    ap.add_argument("--init-arg", action="append", default=[], help="extra coordinator init argument")
    ap.add_argument("--keep-redis-dir", action="store_true")
    ap.add_argument("--hold-on-hang", type=float, default=float(E("CHAOS_HOLD_ON_HANG", "0")),
                    help="on a settle timeout, keep the stuck run alive this many seconds to inspect it")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    if a.stop_max < a.stop_min or a.cut_max < a.cut_min or a.fault_every <= 0 or a.duration > 24 * 3600:
        ap.error("bad bounds")
    if a.netns_workers > a.workers:
        ap.error("--netns-workers > --workers")
    if a.fault_plan:
        a.max_faults = min(a.max_faults, len(a.fault_plan.split(",")))

    def bye(sig, _frm):
        raise SystemExit(128 + sig)
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, bye)
    h = Harness(a)
    try:
        ok = h.run()
    finally:
        h.cleanup()
    sys.exit(0 if ok else 3)


if __name__ == "__main__":
    main()
