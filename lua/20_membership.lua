-- lua/20_membership.lua: barrier helpers, the barrier target, membership changes and the reaper.
-- Part of the diloco Functions library: the Makefile joins lua/*.lua in name order into
-- build/diloco.lua, which every binary embeds (lua/00_header.lua has the library's rules).

-- ---------------------------------------------------------------------------------------------------
-- barriers

-- Live members expected at round r of fragment f: joined round <= r.
local function expected_members(P, f, r)
    local out = {}
    local all = redis.call('HGETALL', P .. ':workers')
    for i = 1, #all, 2 do
        local rec = cmsgpack.unpack(all[i + 1])
        local j = rec.joined and rec.joined[f + 1]
        if j ~= nil and j <= r then out[#out + 1] = all[i] end
    end
    return out
end

local function live_count(P) return redis.call('HLEN', P .. ':workers') end

-- The number of arrivals a barrier needs (state target_workers: Forgather's num_workers) follows the
-- membership between min_workers and the operator's expected_workers (docs/PROTOCOL.md, "Barrier
-- target"). A run left by every member is a fresh run again: the barrier waits for the operator's
-- number. While members remain, a departure shrinks the target to the members left, so the survivors
-- go on, and a member the open barrier of every fragment waits for grows it back (fit_target_to_joins).
local function bounded_target(P, t)
    local minw = tonumber(tunable(P, 'min_workers')) or 1
    local expected = tonumber(tunable(P, 'expected_workers'))
    if expected and t > expected then t = expected end
    if t < minw then t = minw end
    if t < 1 then t = 1 end
    return t
end

local function current_target(P)
    return tonumber(redis.call('HGET', P .. ':state', 'target_workers')) or 1
end

-- A replaced member (dl_register of a live id) comes back in the same call: the run was never empty.
local function fit_target_to_departure(P, why)
    local live = live_count(P)
    local t
    if live == 0 and why ~= 'replaced' then
        t = tonumber(tunable(P, 'expected_workers')) or current_target(P)
    else
        t = math.min(current_target(P), live)
    end
    redis.call('HSET', P .. ':state', 'target_workers', bounded_target(P, t))
end

-- Growth counts only members that every open barrier waits for: a joiner of the next round raises the
-- target when that round opens, never while the open round (which does not expect it) is still
-- waiting, so a join never blocks the open round.
local function fit_target_to_joins(P)
    local fewest = nil
    for f = 0, num_fragments(P) - 1 do
        local r = tonumber(redis.call('HGET', P .. ':state', 'round:' .. f))
        local n = #expected_members(P, f, r)
        if fewest == nil or n < fewest then fewest = n end
    end
    local t = current_target(P)
    if fewest and fewest > t then
        redis.call('HSET', P .. ':state', 'target_workers', bounded_target(P, fewest))
    end
end

-- Close the open barrier of fragment f if every expected member arrived and at least the target number
-- of workers did. Closing freezes the participants (sorted by id), opens round r+1 and wakes them.
local function barrier_try_close(P, f)
    local state = P .. ':state'
    local r = tonumber(redis.call('HGET', state, 'round:' .. f))
    local B = barrier_key(P, f, r)
    local fields = redis.call('HGETALL', B)
    local arrived, n = {}, 0
    for i = 1, #fields, 2 do
        local w = string.match(fields[i], '^a:(.+)$')
        if w then arrived[w] = fields[i + 1]; n = n + 1 end
    end
    if n == 0 then return false end
    for _, w in ipairs(expected_members(P, f, r)) do
        if arrived[w] == nil then return false end
    end
    local target = tonumber(redis.call('HGET', state, 'target_workers')) or 1
    if n < target then return false end

    local ids = {}
    for w, _ in pairs(arrived) do ids[#ids + 1] = w end
    table.sort(ids, bytes_less)
    local parts = {}
    for i, w in ipairs(ids) do parts[i] = w .. ':' .. arrived[w] end
    local t = run_now(P)
    redis.call('HSET', B, 'state', 'closed', 'participants', table.concat(parts, ','), 'closed_ms', t)
    redis.call('EXPIRE', B, 86400)
    drop_old_barrier(P, f, r)
    redis.call('HSET', state, 'round:' .. f, r + 1)
    redis.call('HSET', barrier_key(P, f, r + 1), 'state', 'open', 'opened_ms', t)
    redis.call('HINCRBY', state, 'rounds_closed', 1)
    fit_target_to_joins(P)
    for _, w in ipairs(ids) do wake_member(P, w, get_worker(P, w), f .. ':' .. r) end
    -- also wake the joiners of round r+1 that did not volunteer at r: they wait for this close to start
    -- the next round from its result, together with everyone. A participant that pops the token f:r
    -- while it waits on round r of f takes it as the close (worker/diloco/wake.c: only this call pushes
    -- it); any other token is a hint, after which it reads dl_barrier, so a token nobody waits for is
    -- harmless
    local all = redis.call('HGETALL', P .. ':workers')
    for i = 1, #all, 2 do
        local rec = cmsgpack.unpack(all[i + 1])
        if arrived[all[i]] == nil and rec.joined and rec.joined[f + 1] == r + 1 then
            wake_member(P, all[i], rec, f .. ':' .. r)
        end
    end
    event(P, 'close', {'frag', f, 'round', r, 'participants', n})
    -- announce it to the shard-servers (shard-server/closes.c): the gets of round r+1 they hold parked
    -- are answered at once instead of after a worker asks again. Only an accelerator: a message refused
    -- (an ACL without the channel) or lost changes nothing, the servers read the barrier themselves
    -- within a second (pcall: the close is written already and must not fail now)
    redis.pcall('PUBLISH', P .. ':closes', f .. ':' .. r)
    return true
end

-- Remove worker w (a group of `size` ranks: their arrivals too) from the open barrier of every fragment
-- and re-evaluate them.
local function barrier_forget(P, w, size)
    for f = 0, num_fragments(P) - 1 do
        local r = redis.call('HGET', P .. ':state', 'round:' .. f)
        local B = barrier_key(P, f, r)
        if redis.call('HDEL', B, 'a:' .. w) == 1 then
            event(P, 'dropped', {'worker', w, 'frag', f, 'round', r})
        end
        for q = 0, size - 1 do redis.call('HDEL', B, 'g:' .. w .. ':' .. q) end
    end
    for f = 0, num_fragments(P) - 1 do barrier_try_close(P, f) end
end

-- ---------------------------------------------------------------------------------------------------
-- membership

-- An evicted or kicked incarnation keeps gone:<w> = "why:inc" in dl:{R}:state until w registers again, so
-- that its next call is told why it is no member (check_member) instead of a bare "not a live member".
local function remove_member(P, w, why)
    local rec = get_worker(P, w)
    if not rec then return false end
    redis.call('HDEL', P .. ':workers', w)
    redis.call('ZREM', P .. ':heartbeats', w)
    if why == 'evicted' or why == 'kicked' then
        redis.call('HINCRBY', P .. ':state', 'deaths', 1)
        redis.call('HSET', P .. ':state', 'gone:' .. w, why .. ':' .. rec.inc)
        trim_gone(P)
    end
    fit_target_to_departure(P, why)
    event(P, why, {'worker', w, 'inc', rec.inc})
    barrier_forget(P, w, group_size(rec))
    return true
end

-- The replication ID of the Redis that runs this call (INFO replication's master_replid), or nil where
-- the caller's ACL user may not run INFO (an ACL file older than this rule: no failover is then seen).
local function replication_id()
    local info = redis.pcall('INFO', 'replication')
    if type(info) ~= 'string' then return nil end
    return string.match(info, 'master_replid:(%x+)')
end

-- When the control plane came back from its last failover, plus FAILOVER_GRACE_MS: the time before
-- which silence does not count (0: no failover seen). A failover (a replica promoted, or a restart of
-- Redis) gives the master a new replication ID; the first reap to run on the new master finds it
-- differs from the one recorded in dl:{R}:state (replicated there from the old master) and records the
-- new one with the time it was first seen (`failover` event). Nobody could beat while no master was
-- reachable, so a member's silence counts from the later of its last heartbeat and that time; the grace
-- covers the clients that find the new master after the first one (rconn asks the Sentinels every
-- second while a command waits; a worker's heartbeat connection finds it at a later beat, seconds later
-- on a loaded machine: docs/PROTOCOL.md).
local function control_plane_back(P, now)
    local id = replication_id()
    local st = redis.call('HMGET', P .. ':state', 'replid', 'failover_back_ms')
    if id and id ~= st[1] then
        redis.call('HSET', P .. ':state', 'replid', id)
        if st[1] then -- a change (the first ID ever recorded is no failover)
            local back = now + FAILOVER_GRACE_MS
            redis.call('HSET', P .. ':state', 'failover_back_ms', back)
            event(P, 'failover', {'replid', id, 'grace_ms', FAILOVER_GRACE_MS})
            return back
        end
    end
    return tonumber(st[2]) or 0
end

-- Every member silent past the timeout at once (the `dead` of the reap below are all the members), and one of
-- them has beaten since the last such silence was forgiven: an outage of the control plane that no failover
-- shows (Redis refusing the members' calls, as after a failed RDB save, MISCONF, or at maxclients; Redis
-- stalled; CLIENT PAUSE; Redis's clock stepped forward), or every member stopped at once. Counted as a
-- failover is: silence counts from now (failover_back_ms), with an `outage` event. Before, the first call
-- after such an outage (a heartbeat reaps before it beats) evicted every member, the caller too, and each
-- lost its round. What it costs: members that all died at once are evicted one timeout later. A silence is
-- forgiven once: a member must beat after it for the next one to be.
local function silence_forgiven(P, now, dead)
    local hb = P .. ':heartbeats'
    if dead < redis.call('ZCARD', hb) then return false end
    -- The newest beat; by rank through ZRANGEBYSCORE, which every ACL user may run (deploy/redis/users.acl)
    local last = redis.call('ZRANGEBYSCORE', hb, '-inf', '+inf', 'WITHSCORES', 'LIMIT', dead - 1, 1)
    local newest, state = tonumber(last[2]), P .. ':state'
    if newest <= (tonumber(redis.call('HGET', state, 'silence_forgiven_ms')) or 0) then return false end
    redis.call('HSET', state, 'silence_forgiven_ms', now, 'failover_back_ms', now)
    event(P, 'outage', {'silent_ms', now - newest})
    return true
end

-- Evict every member silent for longer than the timeout (0 disables eviction): whose last heartbeat is
-- older than the timeout, once the control plane has been back from its last failover or outage for that
-- long. The usual reap finds nobody and costs one ZRANGEBYSCORE (a heartbeat and an arrival reap each time).
local function reap(P, now)
    local timeout = tonumber(tunable(P, 'heartbeat_timeout_ms')) or 0
    if timeout <= 0 then return 0 end
    if control_plane_back(P, now) > now - timeout then return 0 end
    local dead = redis.call('ZRANGEBYSCORE', P .. ':heartbeats', '-inf', '(' .. (now - timeout))
    if #dead == 0 or silence_forgiven(P, now, #dead) then return 0 end
    for _, w in ipairs(dead) do remove_member(P, w, 'evicted') end
    return #dead
end

local function check_running(P)
    if tunable(P, 'status') == 'shutdown' then
        error('SHUTDOWN the run has been shut down by an operator and takes no more workers; to train on, ' ..
              'start a new run from it: `coordinator checkpoint save`, then `coordinator init --from-checkpoint`')
    end
end

-- A value a client chose, cut to a size fit for an event or an error message.
local function clip(v)
    local s = tostring(v)
    if #s > 200 then return string.sub(s, 1, 200) .. '...' end
    return s
end

-- Count a rejection in dl:{R}:state and record it in dl:{R}:events (capped at EVENTS_MAXLEN entries, as
-- every event). Data-plane rejections come through dl_reject; control-plane ones are recorded by the
-- function that refuses the call.
local function record_reject(P, fields)
    redis.call('HINCRBY', P .. ':state', 'rejections', 1)
    event(P, 'reject', fields)
end

-- Check that w is a live member with incarnation inc; returns its record. Otherwise the call (`by`, the
-- function's name, with `extra` event fields) is refused with UNKNOWN_WORKER and recorded as a rejection,
-- so an operator sees a stale or misconfigured worker. Redis keeps a function's writes when it then
-- returns an error: the record is this function's deliberate last write before the error, and callers
-- check the caller's membership after every other precondition whose failure must leave no trace.
-- Why incarnation inc of w (record rec, nil: none) is no member, for check_member's message. "was replaced:
-- incarnation N registered since" is how a worker tells that another process took its id (worker/diloco).
local function not_member_why(P, w, inc, rec)
    local who = 'worker ' .. clip(w) .. ' (incarnation ' .. clip(inc) .. ')'
    if rec then
        return who .. ' was replaced: incarnation ' .. rec.inc .. ' registered since from host ' .. clip(rec.host or '') ..
               '; two processes share this worker id, or it was started again'
    end
    local gone = redis.call('HGET', P .. ':state', 'gone:' .. w)
    local why, ginc = string.match(gone or '', '^(%a+):(%d+)$')
    if why == 'kicked' and ginc == tostring(inc) then
        return who .. ' was kicked by the operator (coordinator control kick); register again'
    elseif why == 'evicted' and ginc == tostring(inc) then
        return who .. ' was evicted: no heartbeat for longer than the run\'s heartbeat timeout; register again'
    end
    return who .. ' is not a live member of the run; register again'
end

local function check_member(P, w, inc, by, extra)
    local rec = get_worker(P, w)
    if rec and tostring(rec.inc) == tostring(inc) then return rec end
    local msg = not_member_why(P, w, inc, rec)
    local fields = {'by', by, 'worker', clip(w), 'inc', clip(inc), 'code', 'UNKNOWN_WORKER', 'message', msg}
    for _, v in ipairs(extra or {}) do fields[#fields + 1] = clip(v) end
    record_reject(P, fields)
    error('UNKNOWN_WORKER ' .. msg)
end

