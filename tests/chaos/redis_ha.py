"""redis_ha.py: the Redis of a chaos run as a master, 2 replicas and 3 Sentinels (chaos.py --redis-ha).

The nodes and Sentinels are supervised processes of the harness like any other (a killed node comes
back after --redis-down with the arguments it started with; the Sentinels turn it into a replica of the
current master). The nodes use the settings of deploy/redis-ha/ha.conf (min-replicas-to-write 1, so an
old master cut off from its replicas refuses writes) and the Sentinels the template
deploy/redis-ha/sentinel.conf, with a short down-after-milliseconds so a failover takes seconds.
Faults it adds: kill:redis-master (SIGKILL of the node that is master now) and stop:redis-master
(SIGSTOP past the failover, SIGCONT later: a partitioned old master). They are only injected while the
master has both replicas online, so a replica is always there to take over.
"""
import os
import time

HA_CONF = ["--min-replicas-to-write", "1", "--min-replicas-max-lag", "5", "--replica-serve-stale-data", "no",
           "--repl-backlog-size", "64mb", "--repl-diskless-sync-delay", "0"]


class MasterClient:
    """A Redis client (chaos.Redis) that follows the master the Sentinels name."""

    def __init__(self, redis_cls, sentinels, name):
        self.redis_cls, self.name = redis_cls, name
        self.sentinels = [redis_cls("127.0.0.1", p) for p in sentinels]
        self.r, self.port = None, None

    def master_port(self):
        for s in self.sentinels:
            a = s.cmd("SENTINEL", "get-master-addr-by-name", self.name, timeout=0.5)
            if isinstance(a, list) and len(a) == 2:
                return int(a[1])
        return None

    def cmd(self, *args, timeout=2.0):
        for _ in range(2):
            port = self.master_port()
            if port is None:
                return None
            if port != self.port:
                if self.r:
                    self.r.close()
                self.r, self.port = self.redis_cls("127.0.0.1", port), port
            v = self.r.cmd(*args, timeout=timeout)
            if v is not None:
                return v
        return None

    def close(self):
        for c in self.sentinels + ([self.r] if self.r else []):
            c.close()


class RedisHA:
    def __init__(self, h, proc_cls, redis_cls, free_ports, root):
        self.h, self.a = h, h.a
        self.name = "diloco"
        ports = free_ports(6)  # (picked together: distinct)
        self.ports, self.sports = ports[:3], ports[3:]
        self.nodes, self.sentinels = [], []
        self.redis_cls = redis_cls
        rdir = os.path.join(h.out, "redis")
        for i, p in enumerate(self.ports):
            d = os.path.join(rdir, "node-%d" % p)
            os.makedirs(d, exist_ok=True)
            argv = [self.a.redis_server, "--port", str(p), "--bind", "127.0.0.1", "--save", "", "--dir", d,
                    "--daemonize", "no"] + HA_CONF
            argv += ["--appendonly", "yes", "--appendfsync", "always"] if self.a.aof else ["--appendonly", "no"]
            node = proc_cls(h, "redis%d" % (i + 1), "redis", argv)
            node.argv_fn = self.node_argv(node, p)
            node.can_start = self.failover_done(p)
            self.nodes.append(node)
        with open(os.path.join(root, "deploy", "redis-ha", "sentinel.conf")) as f:
            template = f.read()
        for i, s in enumerate(self.sports):
            d = os.path.join(rdir, "sentinel-%d" % s)
            os.makedirs(d, exist_ok=True)
            conf = (template.replace("@PORT@", str(s)).replace("@DIR@", d).replace("@NAME@", self.name)
                    .replace("@MASTER_PORT@", str(self.ports[0]))
                    .replace("@DOWN_AFTER_MS@", str(self.a.sentinel_down_after_ms)))
            conf = conf.replace("logfile %s/sentinel.log" % d, 'logfile ""')
            path = os.path.join(d, "sentinel.conf")
            with open(path, "w") as f:
                f.write(conf)
            self.sentinels.append(proc_cls(h, "sentinel%d" % (i + 1), "sentinel", ["redis-sentinel", path]))
        self.url = "redis+sentinel://%s/%s" % (",".join("127.0.0.1:%d" % s for s in self.sports), self.name)
        self.client = MasterClient(redis_cls, self.sports, self.name)

    def agreed_master(self):
        """The master every Sentinel names, or None while they disagree (a failover under way)."""
        seen = set()
        for s in self.client.sentinels:
            a = s.cmd("SENTINEL", "get-master-addr-by-name", self.name, timeout=0.5)
            seen.add(int(a[1]) if isinstance(a, list) and len(a) == 2 else None)
        return seen.pop() if len(seen) == 1 else None

    def failover_done(self, port):
        """A killed master restarts once every Sentinel names another master: restarted earlier it would
        be a master nobody follows, or a replica still loading its old data that a failover running at
        that moment could promote."""
        return lambda: self.agreed_master() not in (None, port)

    def node_argv(self, node, port):
        """A node starts as a replica of the master the Sentinels name (at creation: of the first node),
        as its service unit would: it then resynchronises at once instead of waiting for a Sentinel to
        notice a stale master and demote it."""
        def argv():
            m = self.client.master_port() if node.starts > 0 else self.ports[0]
            return node.argv + (["--replicaof", "127.0.0.1", str(m)] if m and m != port else [])
        return argv

    def procs(self):
        return self.nodes + self.sentinels

    def start(self):
        for p in self.procs():
            p.start()
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.ready():
                return
            time.sleep(0.1)
        raise RuntimeError("Redis HA: no master with 2 replicas known to the Sentinels after 30 s")

    def master_proc(self):
        port = self.client.master_port()
        return next((n for n, p in zip(self.nodes, self.ports) if p == port), None)

    def ready(self):
        """Every Sentinel names the same master, which is up and has both replicas online."""
        port = self.agreed_master()
        m = next((n for n, p in zip(self.nodes, self.ports) if p == port), None)
        if m is None or not all(n.healthy() for n in self.nodes):
            return False
        info = self.redis_cls("127.0.0.1", self.ports[self.nodes.index(m)]).cmd("INFO", "replication", timeout=0.5)
        if not (isinstance(info, str) and info.count("state=online") >= 2 and "role:master" in info):
            return False
        return all(self.sentinel_sees_replicas(s) for s in self.client.sentinels)

    def sentinel_sees_replicas(self, s):
        """This Sentinel knows both replicas and sees them healthy (it learns of them from the master's
        INFO, every 10 s: until then a failover finds no replica to promote)."""
        reps = s.cmd("SENTINEL", "REPLICAS", self.name, timeout=0.5)
        if not isinstance(reps, list):
            return False
        good = 0
        for r in reps:
            d = dict(zip(r[0::2], r[1::2])) if isinstance(r, list) else {}
            good += d.get("flags") == "slave" and d.get("master-link-status") == "ok"
        return good >= 2

    def eligible_master(self):
        m = self.master_proc()
        return [m] if m is not None and self.ready() else []

    def healthy(self):
        m = self.master_proc()
        return m is not None and m.healthy()
