#!lua name=diloco
--[[
diloco.lua: the ReDiLoCo control plane, as one Redis Functions library.

It is written as several files, one concern each, that the Makefile joins in name order into
build/diloco.lua (what every binary embeds and `coordinator init` loads): 00_header.lua (these rules),
10_helpers.lua, 15_groups.lua (process groups: one member made of several processes), 20_membership.lua (barrier target, membership changes, the reaper), 30_workers.lua,
40_barriers.lua (sync barriers, async submissions), 50_servers.lua (leases, commits, snapshots),
60_operations.lua (rejections, operator actions, corrupt marks, repair, status), 90_register.lua.
A file may use what an earlier one defines (they are one Lua chunk).

Every change to coordination state (membership, heartbeats, barriers, leases, shard versions, counters,
events) is one function here, so it is atomic and survives any client crash. Redis does not roll back
a function that fails half-way, so every function checks ALL its preconditions before its first write
and fails with a fixed error code (first word of the error):

  NORUN           the run does not exist (run `coordinator init`)
  LOST            the run's config is there but a key every run has is not (evicted by a Redis whose
                  maxmemory-policy is not noeviction, or deleted): nothing is made anew in its place
  EXISTS          the run already exists
  BADARG          an argument is malformed
  UNKNOWN_WORKER  the worker is not a live member (evicted, never registered, or an old incarnation)
  STALE           the round is not the open round of that fragment
  NOTCLOSED       the barrier is still open
  FENCED          the lease is not held by the caller with that epoch (or expired)
  VERSION         the shard is not at the version the caller expects
  ALIVE           the worker is still a live member (it cannot be dropped from a round)
  SHUTDOWN        the run has been shut down
  OLDRUN          the run was created by another version of this library (its keys are laid out differently)
  RECREATED       the run was made again (coordinator init --force) since the caller loaded it: its shards,
                  secret and members are another run's
  REPLACED        the caller's shard-server id was taken over by another process since (a second process
                  started with the same --id): the caller stops
  GROUP           a process group's ranks are not in step (a rank joining a group that already synced,
                  a rank arriving, or its rank 0 submitting, before every rank joined)

All keys of run R carry the hash tag {R} so a Redis Cluster keeps them on one node; KEYS[1] is always
dl:{R}:config and the other names are derived from it. The format of every key is documented in
docs/PROTOCOL.md. Times are Redis TIME in milliseconds, never a client's clock, kept from stepping back by
the run's skew (10_helpers.lua, run_now).

Who may write what. Redis checks the ACL of the CALLING user on every redis.call a function makes, so
what a function may change is what its caller may change. The operator's settings (outer lr/momentum,
Nesterov, heartbeat timeout, staleness limit, DyLU, worker counts, running/shutdown) live in their own
hash dl:{R}:tunables, which only operator functions (dl_init, dl_set, dl_shutdown, dl_kick) write and
which deploy/redis/users.acl gives the worker and shard-server users read-only (%R~). Every operator
function makes its first write to that hash (operator_gate), after its checks: for any other user the
function stops there with an ACL error, before anything changed. Worker and server functions only READ
dl:{R}:tunables; the counters and the round state they must change stay in dl:{R}:state.
]]

-- 2: operator settings moved from dl:{R}:state to dl:{R}:tunables (version 1 kept them in state)
-- 3: dl_commit, dl_snapshot, dl_init and dl_repair keep k:digests, the digest of every version a shard
--    can still be rebuilt at (coordinator repair verifies against it)
local LIB_VERSION = '3'
-- Which build of this library it is (the Makefile puts the hash of the joined text here): a Redis can hold an
-- older build of the same version, which the binaries work with but without the newer fixes; they say so
-- (dl_build), and `coordinator load-library` loads theirs.
local LIB_BUILD = '@LIB_BUILD@'
local EVENTS_MAXLEN = 100000
-- How many closed barriers of each fragment a run keeps (the config's barriers_kept, when present, for tests):
-- closing round r drops the barrier of round r - BARRIERS_KEPT, besides the day each one expires after, so a
-- run of fast rounds does not keep a day of them (25 rounds a second: 2.16 million keys, 430 MB). A shard
-- commits the round at its version, never more than a few rounds behind the open one: none reads one so old.
local BARRIERS_KEPT = 10000
-- How long (in versions of its shard) the record of an async submission, `worker:inc:base` in subs:<k>, is
-- kept after its commit (dl_commit removes the one SUBS_KEPT versions older): long enough for the worker
-- that made it to ask dl_places once its get returned, which comes right after the commit.
local SUBS_KEPT = 256
-- After a failover of Redis, how long the reaper waits for every client to find the new master before
-- silence counts again (20_membership.lua, control_plane_back; docs/PROTOCOL.md, Heartbeats and failovers)
local FAILOVER_GRACE_MS = 5000

