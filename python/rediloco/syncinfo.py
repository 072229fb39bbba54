"""syncinfo.py: SyncInfo, the facts of one sync (diloco_sync_info)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SyncInfo:
    fragment: int        # which Streaming fragment synced (0 without)
    round: int           # the round this sync completed
    version: int         # global version now held (round + 1)
    seconds: float       # first pseudo-gradient byte sent to last parameter byte received
    wait_seconds: float  # part of it waiting at the barrier
    bytes_up: int        # pseudo-gradient bytes sent (resends included)
    bytes_down: int      # parameter bytes received
    digest: str          # XXH3-64 of the whole new global parameter vector, 16 hex digits
    stale: bool          # the round was lost and the parameters were fetched again instead
    # phase timestamps, CLOCK_REALTIME microseconds (0: the phase did not happen): first pseudo-gradient
    # byte sent, every push acknowledged, barrier closed (first get sent), last parameter byte received
    t_first_send_us: int = 0
    t_pushed_us: int = 0
    t_get_us: int = 0
    t_last_recv_us: int = 0
    confirm_seconds: float = 0.0  # before the round: confirming the previous round's parameters durable
    # the whole run's digest as a sum over its shards (diloco_sync_info.shards_digest): the same on every
    # member, a sharded group's ranks included (digest is then the XXH3 of the rank's own slices)
    shards_digest: str = "0" * 16
    # shards of the previous round sent again and fetched again by that confirm (a new owner recomputed them)
    confirm_shards: int = 0

    @classmethod
    def from_c(cls, c: Any) -> SyncInfo:
        return cls(c.fragment, c.round, c.version, c.seconds, c.wait_seconds, c.bytes_up, c.bytes_down,
                   "%016x" % c.digest, bool(c.stale), c.t_first_send_us, c.t_pushed_us, c.t_get_us,
                   c.t_last_recv_us, c.confirm_seconds, "%016x" % c.shards_digest, c.confirm_shards)
