#!lua name=diloco
--[[
diloco.lua: the ReDiLoCo control plane, as one Redis Functions library.

Every change to coordination state (membership, heartbeats, barriers, leases, shard versions, counters,
events) is one function here, so it is atomic and survives any client crash. Redis does not roll back
a function that fails half-way, so every function checks ALL its preconditions before its first write
and fails with a fixed error code (first word of the error):

  NORUN           the run does not exist (run `coordinator init`)
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

All keys of run R carry the hash tag {R} so a Redis Cluster keeps them on one node; KEYS[1] is always
dl:{R}:config and the other names are derived from it. The format of every key is documented in
docs/PROTOCOL.md. Times are Redis TIME in milliseconds, never a client's clock.

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
local LIB_VERSION = '2'
local EVENTS_MAXLEN = 100000

-- ---------------------------------------------------------------------------------------------------
-- small helpers

local function now_ms()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function prefix_of(config_key)
    local p = string.match(config_key, '^(dl:{[^}]+}):config$')
    if not p then error('BADARG the first key must be dl:{RUN}:config, got ' .. tostring(config_key)) end
    return p
end

local function fail(msg) return redis.error_reply(msg) end

local function to_int(s, what)
    local n = tonumber(s)
    if n == nil or n ~= math.floor(n) then error('BADARG ' .. what .. ' must be an integer, got ' .. tostring(s)) end
    return n
end

local function to_num(s, what)
    local n = tonumber(s)
    if n == nil or n ~= n then error('BADARG ' .. what .. ' must be a number, got ' .. tostring(s)) end
    return n
end

local function hget_num(key, field, default)
    local v = redis.call('HGET', key, field)
    if not v then return default end
    return tonumber(v)
end

local function split_csv(s)
    local out = {}
    if s == nil or s == false or s == '' then return out end
    for item in string.gmatch(s, '[^,]+') do out[#out + 1] = item end
    return out
end

local function event(P, kind, fields)
    local args = {P .. ':events', 'MAXLEN', '~', EVENTS_MAXLEN, '*', 'type', kind}
    for i = 1, #fields, 2 do
        args[#args + 1] = fields[i]
        args[#args + 1] = tostring(fields[i + 1])
    end
    redis.call('XADD', unpack(args))
end

local function load_run(keys)
    local P = prefix_of(keys[1])
    local v = redis.call('HGET', keys[1], 'lib_version')
    if not v then error('NORUN run ' .. P .. ' does not exist; run `coordinator init` first') end
    -- a run made by another library version keeps its keys differently (version 1: the operator's
    -- settings in dl:{R}:state): reading it with these functions would silently use defaults
    if v ~= LIB_VERSION then
        error('OLDRUN run ' .. P .. ' was created by function library version ' .. v .. ', this is version ' ..
              LIB_VERSION .. '; finish it with the binaries of that release (or export a checkpoint with them ' ..
              'and init a new run from it)')
    end
    return P
end

-- The operator's settings of the run (see the header): read by everyone, written only by operator
-- functions, each of which goes through operator_gate first.
local function tunables_key(P) return P .. ':tunables' end
local function tunable(P, field) return redis.call('HGET', P .. ':tunables', field) end

-- The first write of every operator function, made after all its checks. Only the operator user may
-- write dl:{R}:tunables, so for a worker or shard-server this HINCRBY fails with an ACL error and the
-- function has changed nothing. operator_rev counts the operator's actions (set, shutdown, kick).
local function operator_gate(P)
    redis.call('HINCRBY', P .. ':tunables', 'operator_rev', 1)
end

-- Fields of dl_init's state list that are operator settings (dl:{R}:tunables); the rest go to dl:{R}:state.
-- expected_workers is the operator's -n (and every later dl_set target_workers); state's target_workers
-- is the live barrier target, which starts there and follows the membership (fit_target_*; worker
-- functions write it).
local OPERATOR_FIELDS = {status = true, outer_lr = true, outer_momentum = true, nesterov = true,
                         min_workers = true, expected_workers = true, heartbeat_timeout_ms = true,
                         max_staleness = true, dylu = true, dylu_base_sync_every = true}

local function num_fragments(P)
    return tonumber(redis.call('HGET', P .. ':config', 'fragments')) or 1
end

-- worker records are msgpack maps: {inc, host, joined = {f -> round}, registered, speed, loss, step, tokens, h}
local function get_worker(P, w)
    local raw = redis.call('HGET', P .. ':workers', w)
    if not raw then return nil end
    return cmsgpack.unpack(raw)
end

local function put_worker(P, w, rec)
    redis.call('HSET', P .. ':workers', w, cmsgpack.pack(rec))
end

local function barrier_key(P, f, r) return P .. ':f' .. f .. ':r' .. r end

-- Byte-wise string order (Lua's < follows the C library's collation, which depends on the locale):
-- participants are summed in this order, so it must be the same as C's strcmp everywhere.
local function bytes_less(a, b)
    local n = math.min(#a, #b)
    for i = 1, n do
        local x, y = string.byte(a, i), string.byte(b, i)
        if x ~= y then return x < y end
    end
    return #a < #b
end

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
    local t = now_ms()
    redis.call('HSET', B, 'state', 'closed', 'participants', table.concat(parts, ','), 'closed_ms', t)
    redis.call('EXPIRE', B, 86400)
    redis.call('HSET', state, 'round:' .. f, r + 1)
    redis.call('HSET', barrier_key(P, f, r + 1), 'state', 'open', 'opened_ms', t)
    redis.call('HINCRBY', state, 'rounds_closed', 1)
    fit_target_to_joins(P)
    for _, w in ipairs(ids) do
        local wk = P .. ':wake:' .. w
        redis.call('RPUSH', wk, f .. ':' .. r)
        redis.call('EXPIRE', wk, 600)
    end
    -- also wake the joiners of round r+1 that did not volunteer at r: they wait for this close to start
    -- the next round from its result, together with everyone (a wake token is only a hint: whoever
    -- pops one reads dl_barrier, so a token nobody waits for is harmless)
    local all = redis.call('HGETALL', P .. ':workers')
    for i = 1, #all, 2 do
        local rec = cmsgpack.unpack(all[i + 1])
        if arrived[all[i]] == nil and rec.joined and rec.joined[f + 1] == r + 1 then
            local wk = P .. ':wake:' .. all[i]
            redis.call('RPUSH', wk, f .. ':' .. r)
            redis.call('EXPIRE', wk, 600)
        end
    end
    event(P, 'close', {'frag', f, 'round', r, 'participants', n})
    return true
end

-- Remove worker w from the open barrier of every fragment and re-evaluate them.
local function barrier_forget(P, w)
    for f = 0, num_fragments(P) - 1 do
        local r = redis.call('HGET', P .. ':state', 'round:' .. f)
        if redis.call('HDEL', barrier_key(P, f, r), 'a:' .. w) == 1 then
            event(P, 'dropped', {'worker', w, 'frag', f, 'round', r})
        end
    end
    for f = 0, num_fragments(P) - 1 do barrier_try_close(P, f) end
end

-- ---------------------------------------------------------------------------------------------------
-- membership

local function remove_member(P, w, why)
    local rec = get_worker(P, w)
    if not rec then return false end
    redis.call('HDEL', P .. ':workers', w)
    redis.call('ZREM', P .. ':heartbeats', w)
    if why == 'evicted' or why == 'kicked' then redis.call('HINCRBY', P .. ':state', 'deaths', 1) end
    fit_target_to_departure(P, why)
    event(P, why, {'worker', w, 'inc', rec.inc})
    barrier_forget(P, w)
    return true
end

-- Evict every member whose last heartbeat is older than the timeout (0 disables eviction).
local function reap(P, now)
    local timeout = tonumber(tunable(P, 'heartbeat_timeout_ms')) or 0
    if timeout <= 0 then return 0 end
    local dead = redis.call('ZRANGEBYSCORE', P .. ':heartbeats', '-inf', '(' .. (now - timeout))
    for _, w in ipairs(dead) do remove_member(P, w, 'evicted') end
    return #dead
end

local function check_running(P)
    if tunable(P, 'status') == 'shutdown' then
        error('SHUTDOWN the run has been shut down by an operator')
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
local function check_member(P, w, inc, by, extra)
    local rec = get_worker(P, w)
    if rec and tostring(rec.inc) == tostring(inc) then return rec end
    local msg = 'worker ' .. clip(w) .. ' (incarnation ' .. clip(inc) .. ') is not a live member of the run; register again'
    local fields = {'by', by, 'worker', clip(w), 'inc', clip(inc), 'code', 'UNKNOWN_WORKER', 'message', msg}
    for _, v in ipairs(extra or {}) do fields[#fields + 1] = clip(v) end
    record_reject(P, fields)
    error('UNKNOWN_WORKER ' .. msg)
end

-- ---------------------------------------------------------------------------------------------------
-- functions: run lifecycle

-- dl_init KEYS[1]=config ARGV: nconfig, (field, value)*nconfig, nstate, (field, value)*nstate,
--          nshards, digest_0 .. digest_{nshards-1}
local function dl_init(keys, args)
    local P = prefix_of(keys[1])
    if redis.call('EXISTS', keys[1]) == 1 then
        error('EXISTS run ' .. P .. ' already exists; use another --run name, or --force to replace it')
    end
    local i = 1
    local nconf = to_int(args[i], 'nconfig'); i = i + 1
    local conf = {}
    for _ = 1, nconf do conf[#conf + 1] = args[i]; conf[#conf + 1] = args[i + 1]; i = i + 2 end
    local nstate = to_int(args[i], 'nstate'); i = i + 1
    local st, tun = {}, {}
    for _ = 1, nstate do
        local into = OPERATOR_FIELDS[args[i]] and tun or st
        into[#into + 1] = args[i]; into[#into + 1] = args[i + 1]; i = i + 2
    end
    local nshards = to_int(args[i], 'nshards'); i = i + 1
    if nshards < 1 or #args ~= i - 1 + nshards then error('BADARG expected ' .. nshards .. ' shard digests') end
    -- all checks done: write
    redis.call('HSET', keys[1], 'lib_version', LIB_VERSION, 'created_ms', now_ms(), unpack(conf))
    redis.call('HSET', tunables_key(P), 'status', 'running', 'operator_rev', 0, unpack(tun))
    redis.call('HSET', P .. ':state', 'rounds_closed', 0, 'commits', 0,
               'rejections', 0, 'deaths', 0, 'joins', 0, 'incarnations', 0, unpack(st))
    local F = tonumber(redis.call('HGET', keys[1], 'fragments')) or 1
    for f = 0, F - 1 do
        redis.call('HSET', P .. ':state', 'round:' .. f, 0)
        redis.call('HSET', barrier_key(P, f, 0), 'state', 'open', 'opened_ms', now_ms())
    end
    for k = 0, nshards - 1 do
        redis.call('HSET', P .. ':shards', k .. ':version', 0, k .. ':owner', '', k .. ':epoch', 0,
                   k .. ':expiry', 0, k .. ':digest', args[i + k], k .. ':snap', '0.0', k .. ':log', '',
                   k .. ':next', 0)
    end
    event(P, 'init', {'shards', nshards, 'fragments', F})
    return 'OK'
end

local function dl_version(keys, args) return LIB_VERSION end

-- ---------------------------------------------------------------------------------------------------
-- functions: workers

-- dl_register KEYS[1]=config ARGV: worker_id, host, sync_every
-- -> {incarnation, lib_version, {round per fragment}, {joined round per fragment}}
local function dl_register(keys, args)
    local P = load_run(keys)
    local w, host, h = args[1], args[2] or '', tonumber(args[3] or '0') or 0
    if w == nil or w == '' or string.find(w, '[,:%s]') then
        error('BADARG worker id must be non-empty without commas, colons or spaces')
    end
    check_running(P)
    local now = now_ms()
    reap(P, now)
    if get_worker(P, w) then remove_member(P, w, 'replaced') end

    local state = P .. ':state'
    local target = tonumber(redis.call('HGET', state, 'target_workers')) or 1
    local F = num_fragments(P)
    local rounds, joined = {}, {}
    for f = 0, F - 1 do
        local r = tonumber(redis.call('HGET', state, 'round:' .. f))
        rounds[f + 1] = r
        -- a joiner fills an under-populated barrier; otherwise it never blocks the open round
        if #expected_members(P, f, r) < target then joined[f + 1] = r else joined[f + 1] = r + 1 end
    end
    local inc = redis.call('HINCRBY', state, 'incarnations', 1)
    put_worker(P, w, {inc = inc, host = host, joined = joined, registered = now, speed = 0, loss = -1,
                      step = 0, tokens = 0, h = h, sync_every = h})
    redis.call('ZADD', P .. ':heartbeats', now, w)
    redis.call('HINCRBY', state, 'joins', 1)
    event(P, 'join', {'worker', w, 'inc', inc, 'host', host, 'joined', joined[1]})
    return {inc, LIB_VERSION, rounds, joined}
end

-- dl_deregister KEYS[1]=config ARGV: worker_id, incarnation
local function dl_deregister(keys, args)
    local P = load_run(keys)
    check_member(P, args[1], args[2], 'dl_deregister')
    remove_member(P, args[1], 'left')
    return 'OK'
end

-- The progress a worker reports with its heartbeat, checked before the heartbeat writes anything.
local function parse_beat(args)
    return {speed = to_num(args[3] or 0, 'speed'), loss = to_num(args[4] or -1, 'loss'),
            step = to_int(args[5] or 0, 'step'), tokens = to_int(args[6] or 0, 'tokens')}
end

-- DyLU: worker w's H in proportion to its speed against the fastest live member's, counting w at
-- the speed it reports now. nil when DyLU is off (the worker keeps its own H).
local function dylu_h(P, w, speed)
    if tunable(P, 'dylu') ~= '1' then return nil end
    local base = tonumber(tunable(P, 'dylu_base_sync_every')) or 500
    local vmax = speed
    local all = redis.call('HGETALL', P .. ':workers')
    for i = 1, #all, 2 do
        if all[i] ~= w then
            local o = cmsgpack.unpack(all[i + 1])
            if (o.speed or 0) > vmax then vmax = o.speed end
        end
    end
    if vmax > 0 and speed > 0 then return math.max(1, math.floor(speed / vmax * base)) end
    return 0
end

local function fragment_rounds(P)
    local rounds = {}
    for f = 0, num_fragments(P) - 1 do
        rounds[f + 1] = tonumber(redis.call('HGET', P .. ':state', 'round:' .. f))
    end
    return rounds
end

-- dl_heartbeat KEYS[1]=config ARGV: worker_id, incarnation, steps_per_s, loss, step, tokens
-- -> {status, H for this worker (0 = keep yours), {round per fragment}}
-- Checks the arguments, then applies the membership rule (reap, then is the caller a member), then
-- writes the caller's one record.
local function dl_heartbeat(keys, args)
    local P = load_run(keys)
    local w, inc = args[1], args[2]
    local beat = parse_beat(args)
    local now = now_ms()
    reap(P, now)
    local rec = check_member(P, w, inc, 'dl_heartbeat')
    local h = dylu_h(P, w, beat.speed)
    rec.speed, rec.loss, rec.step, rec.tokens, rec.last = beat.speed, beat.loss, beat.step, beat.tokens, now
    if h then rec.h = h end
    put_worker(P, w, rec)
    redis.call('ZADD', P .. ':heartbeats', now, w)
    return {tunable(P, 'status'), h or 0, fragment_rounds(P)}
end

-- dl_member KEYS[1]=config ARGV: worker_id -> incarnation or nil (read-only; used by shard-servers)
local function dl_member(keys, args)
    local P = load_run(keys)
    local rec = get_worker(P, args[1])
    if not rec then return false end
    return rec.inc
end

-- dl_reap KEYS[1]=config -> number of members evicted
local function dl_reap(keys, args)
    local P = load_run(keys)
    return reap(P, now_ms())
end

-- ---------------------------------------------------------------------------------------------------
-- functions: barriers

-- dl_arrive KEYS[1]=config ARGV: worker_id, incarnation, fragment, round
-- -> {'closed'|'open', round, arrived count}
local function dl_arrive(keys, args)
    local P = load_run(keys)
    local w, inc = args[1], args[2]
    local f, r = to_int(args[3], 'fragment'), to_int(args[4], 'round')
    if f < 0 or f >= num_fragments(P) then error('BADARG fragment ' .. f .. ' does not exist') end
    local now = now_ms()
    reap(P, now)
    check_running(P)
    check_member(P, w, inc, 'dl_arrive', {'frag', f, 'round', r})
    local cur = tonumber(redis.call('HGET', P .. ':state', 'round:' .. f))
    if r ~= cur then
        error('STALE round ' .. r .. ' of fragment ' .. f .. ' is not open (open round is ' .. cur ..
              '); fetch the current parameters and start a new round')
    end
    local B = barrier_key(P, f, r)
    redis.call('HSET', B, 'a:' .. w, inc)
    redis.call('ZADD', P .. ':heartbeats', now, w)
    local closed = barrier_try_close(P, f)
    local n = 0
    if not closed then
        for _, k in ipairs(redis.call('HKEYS', B)) do if string.sub(k, 1, 2) == 'a:' then n = n + 1 end end
    end
    return {closed and 'closed' or 'open', r, n}
end

-- dl_barrier KEYS[1]=config ARGV: fragment, round [, missing]
-- -> {state, participants csv, dropped csv, open round of the fragment [, missing]}. Reaps first, so a
-- worker that waits on a barrier whose members died is released by its own polling. With a third
-- argument 1, also the number of live members the open barrier still waits for (joined <= round, not
-- arrived): a joiner waiting for the round to close learns that nobody is left to close it.
local function dl_barrier(keys, args)
    local P = load_run(keys)
    local f, r = to_int(args[1], 'fragment'), to_int(args[2], 'round')
    reap(P, now_ms())
    local B = barrier_key(P, f, r)
    local st = redis.call('HMGET', B, 'state', 'participants', 'dropped')
    local cur = tonumber(redis.call('HGET', P .. ':state', 'round:' .. f))
    local state = st[1]
    if not state then
        if r < cur then state = 'expired' else state = 'none' end
    end
    if args[3] ~= '1' then return {state, st[2] or '', st[3] or '', cur} end
    local missing = 0
    if state == 'open' then
        for _, w in ipairs(expected_members(P, f, r)) do
            if redis.call('HEXISTS', B, 'a:' .. w) == 0 then missing = missing + 1 end
        end
    end
    return {state, st[2] or '', st[3] or '', cur, missing}
end

-- dl_drop KEYS[1]=config ARGV: fragment, round, worker_id
-- A closed round whose participant w died before a shard received its pseudo-gradient again can never
-- commit that shard with w; drop w from the round for every shard not yet committed.
local function dl_drop(keys, args)
    local P = load_run(keys)
    local f, r, w = to_int(args[1], 'fragment'), to_int(args[2], 'round'), args[3]
    reap(P, now_ms())
    local B = barrier_key(P, f, r)
    local st = redis.call('HMGET', B, 'state', 'participants', 'dropped')
    if st[1] ~= 'closed' then error('NOTCLOSED round ' .. r .. ' of fragment ' .. f .. ' is not closed') end
    local inc = nil
    for _, p in ipairs(split_csv(st[2])) do
        local id, i = string.match(p, '^(.+):(%d+)$')
        if id == w then inc = i end
    end
    if not inc then error('BADARG worker ' .. w .. ' is not a participant of round ' .. r) end
    local rec = get_worker(P, w)
    if rec and tostring(rec.inc) == inc then
        error('ALIVE worker ' .. w .. ' is still a live member; it will resend its pseudo-gradient')
    end
    for _, d in ipairs(split_csv(st[3])) do if d == w then return st[3] end end
    local dropped = (st[3] and st[3] ~= '') and (st[3] .. ',' .. w) or w
    redis.call('HSET', B, 'dropped', dropped)
    event(P, 'drop', {'worker', w, 'frag', f, 'round', r})
    return dropped
end

-- ---------------------------------------------------------------------------------------------------
-- functions: async mode

-- dl_submit KEYS[1]=config ARGV: worker_id, incarnation, fragment, (shard, base_version)*
-- Gives each shard's submission its place in that shard's order: seq s means the submission turns
-- version s into s+1 (staleness = s - base). All shards are checked before any is assigned, so a
-- submission is all or nothing. -> {seq per shard, in the order given}
local function dl_submit(keys, args)
    local P = load_run(keys)
    local w, inc, f = args[1], args[2], to_int(args[3], 'fragment')
    if redis.call('HGET', keys[1], 'mode') ~= 'async' then
        error('BADARG run ' .. P .. ' is in sync mode: workers arrive at barriers instead of submitting')
    end
    if #args < 5 or (#args - 3) % 2 ~= 0 then error('BADARG expected (shard, base_version) pairs') end
    local now = now_ms()
    reap(P, now)
    check_running(P)
    local rec = check_member(P, w, inc, 'dl_submit', {'frag', f})
    local shards = P .. ':shards'
    local limit = tonumber(tunable(P, 'max_staleness')) or 0
    local plan = {}
    for i = 4, #args, 2 do
        local k, base = to_int(args[i], 'shard'), to_int(args[i + 1], 'base_version')
        local nxt = tonumber(redis.call('HGET', shards, k .. ':next'))
        if not nxt then error('BADARG shard ' .. k .. ' does not exist') end
        if base > nxt then error('BADARG base version ' .. base .. ' of shard ' .. k .. ' is in the future') end
        if limit > 0 and nxt - base > limit then
            -- the rejection itself is recorded (the only writes before this error), nothing else changes
            record_reject(P, {'by', 'dl_submit', 'worker', w, 'code', 'STALE', 'shard', k, 'staleness', nxt - base})
            error('STALE a submission for shard ' .. k .. ' from version ' .. base .. ' would be ' .. (nxt - base) ..
                  ' versions stale (limit ' .. limit .. '); fetch the current parameters')
        end
        plan[#plan + 1] = {k, base, nxt}
    end
    local seqs, worst, sum = {}, 0, 0
    for i, p in ipairs(plan) do
        local k, base, s = p[1], p[2], p[3]
        redis.call('HSET', shards, k .. ':next', s + 1)
        redis.call('HSET', P .. ':subs:' .. k, s, w .. ':' .. inc .. ':' .. base)
        event(P, 'submit', {'worker', w, 'shard', k, 'seq', s, 'base', base, 'staleness', s - base, 'frag', f})
        seqs[i] = s
        sum = sum + (s - base)
        if s - base > worst then worst = s - base end
    end
    local mean = sum / #plan
    rec.stale_last = mean
    rec.stale_n = (rec.stale_n or 0) + 1
    rec.stale_sum = (rec.stale_sum or 0) + mean
    rec.stale_mean = rec.stale_sum / rec.stale_n
    rec.stale_max = math.max(rec.stale_max or 0, worst)
    put_worker(P, w, rec)
    redis.call('ZADD', P .. ':heartbeats', now, w)
    return seqs
end

-- ---------------------------------------------------------------------------------------------------
-- functions: shard-servers and leases

-- Forget servers silent for longer than a lease (their leases have expired too) and count the rest.
local function live_servers(P, now, ttl)
    local dead = redis.call('ZRANGEBYSCORE', P .. ':server_beats', '-inf', '(' .. (now - ttl))
    for _, sid in ipairs(dead) do
        redis.call('ZREM', P .. ':server_beats', sid)
        redis.call('HDEL', P .. ':servers', sid)
        event(P, 'server_gone', {'server', sid})
    end
    return redis.call('ZCARD', P .. ':server_beats')
end

-- dl_server_beat KEYS[1]=config ARGV: server_id, address, ttl_ms, pid[, loaded]
-- Renews the caller's valid leases, takes free or expired shards up to its fair share
-- ceil(shards/servers), and gives back shards above it so a new server gets work.
-- loaded (comma-separated shard numbers, possibly empty) are the shards the caller has in memory: a
-- valid lease of its id on a shard not among them is taken anew with a new epoch (the process restarted
-- with the same id, or dropped the shard): what the old epoch promised (parameters sent but not yet
-- committed, docs/PROTOCOL.md) died with that memory, and workers learn it from the epoch.
-- -> flat {shard, epoch, shard, epoch, ...} of the leases the caller now holds.
local function dl_server_beat(keys, args)
    local P = load_run(keys)
    local sid, addr = args[1], args[2]
    local ttl = to_int(args[3], 'ttl_ms')
    if sid == nil or sid == '' or ttl <= 0 then error('BADARG server id and a positive ttl are required') end
    local loaded = nil
    if args[5] ~= nil then
        loaded = {}
        for k in string.gmatch(args[5], '%d+') do loaded[tonumber(k)] = true end
    end
    local now = now_ms()
    local S = tonumber(redis.call('HGET', keys[1], 'shards'))
    local shards = P .. ':shards'
    redis.call('ZADD', P .. ':server_beats', now, sid)
    local n = math.max(1, live_servers(P, now, ttl))
    local fair = math.ceil(S / n)
    local held, free = {}, {}
    for k = 0, S - 1 do
        local v = redis.call('HMGET', shards, k .. ':owner', k .. ':expiry')
        local owner, expiry = v[1], tonumber(v[2]) or 0
        if owner == sid and expiry >= now then
            if loaded ~= nil and not loaded[k] then
                local epoch = redis.call('HINCRBY', shards, k .. ':epoch', 1)
                redis.call('HINCRBY', P .. ':state', 'lease_changes', 1)
                event(P, 'lease', {'shard', k, 'server', sid, 'epoch', epoch})
            end
            held[#held + 1] = k
        elseif owner == '' or expiry < now then free[#free + 1] = k end
    end
    -- give back the highest-numbered shards above the fair share, but only when someone lacks work
    while #held > fair and #free == 0 do
        local k = table.remove(held)
        redis.call('HSET', shards, k .. ':owner', '', k .. ':expiry', 0)
        redis.call('HINCRBY', P .. ':state', 'lease_changes', 1)
        event(P, 'release', {'shard', k, 'server', sid})
    end
    for _, k in ipairs(held) do redis.call('HSET', shards, k .. ':expiry', now + ttl) end
    for _, k in ipairs(free) do
        if #held >= fair then break end
        local epoch = redis.call('HINCRBY', shards, k .. ':epoch', 1)
        redis.call('HSET', shards, k .. ':owner', sid, k .. ':expiry', now + ttl)
        redis.call('HINCRBY', P .. ':state', 'lease_changes', 1)
        event(P, 'lease', {'shard', k, 'server', sid, 'epoch', epoch})
        held[#held + 1] = k
    end
    table.sort(held)
    local out = {}
    for _, k in ipairs(held) do
        out[#out + 1] = k
        out[#out + 1] = tonumber(redis.call('HGET', shards, k .. ':epoch'))
    end
    redis.call('HSET', P .. ':servers', sid, cmsgpack.pack({addr = addr, pid = args[4] or '', last = now,
                                                           held = #held}))
    return out
end

-- dl_server_leave KEYS[1]=config ARGV: server_id  (clean shutdown: give every lease back)
local function dl_server_leave(keys, args)
    local P = load_run(keys)
    local sid = args[1]
    local S = tonumber(redis.call('HGET', keys[1], 'shards'))
    for k = 0, S - 1 do
        if redis.call('HGET', P .. ':shards', k .. ':owner') == sid then
            redis.call('HSET', P .. ':shards', k .. ':owner', '', k .. ':expiry', 0)
            event(P, 'release', {'shard', k, 'server', sid})
        end
    end
    redis.call('ZREM', P .. ':server_beats', sid)
    redis.call('HDEL', P .. ':servers', sid)
    return 'OK'
end

local function check_lease(P, sid, k, epoch, now)
    local v = redis.call('HMGET', P .. ':shards', k .. ':owner', k .. ':epoch', k .. ':expiry', k .. ':version')
    if v[1] ~= sid or tostring(v[2]) ~= tostring(epoch) or (tonumber(v[3]) or 0) < now then
        error('FENCED shard ' .. k .. ' is not leased to ' .. sid .. ' with epoch ' .. tostring(epoch) ..
              ' (owner ' .. tostring(v[1]) .. ', epoch ' .. tostring(v[2]) .. ')')
    end
    return tonumber(v[4])
end

-- dl_commit KEYS[1]=config ARGV: server_id, epoch, shard, from_version, digest, log_ref, participants, frag, round
-- Makes version from+1 of the shard current: fenced by the lease epoch and by the version.
local function dl_commit(keys, args)
    local P = load_run(keys)
    local sid, epoch, k = args[1], args[2], to_int(args[3], 'shard')
    local from = to_int(args[4], 'from_version')
    local digest, logref, nparts = args[5], args[6], args[7]
    local now = now_ms()
    local cur = check_lease(P, sid, k, epoch, now)
    if cur ~= from then
        error('VERSION shard ' .. k .. ' is at version ' .. cur .. ', not ' .. from)
    end
    local shards = P .. ':shards'
    local log = redis.call('HGET', shards, k .. ':log')
    if log and log ~= '' then log = log .. ',' .. logref else log = logref end
    redis.call('HSET', shards, k .. ':version', from + 1, k .. ':digest', digest, k .. ':log', log,
               k .. ':committed_ms', now)
    redis.call('HINCRBY', P .. ':state', 'commits', 1)
    redis.call('HDEL', P .. ':subs:' .. k, from)
    event(P, 'commit', {'shard', k, 'version', from + 1, 'server', sid, 'epoch', epoch,
                        'participants', nparts, 'frag', args[8] or 0, 'round', args[9] or from})
    return from + 1
end

-- dl_replicated KEYS[1]=config ARGV: server_id, epoch, shard, version
-- A run with min_replicas > 0: the lease holder's WAIT said that many replicas have the commit of
-- `version` (and so everything written before it). Records k:replicated = version, which the workers'
-- confirmation of tentative parameters requires (docs/PROTOCOL.md, "Durable means replicated"). The mark
-- itself may be lost in a failover; the commit it names may not. -> the version now recorded.
local function dl_replicated(keys, args)
    local P = load_run(keys)
    local sid, epoch, k = args[1], args[2], to_int(args[3], 'shard')
    local v = to_int(args[4], 'version')
    local cur = check_lease(P, sid, k, epoch, now_ms())
    if v > cur then error('VERSION shard ' .. k .. ' is at version ' .. cur .. ', not ' .. v) end
    local shards = P .. ':shards'
    local was = tonumber(redis.call('HGET', shards, k .. ':replicated')) or 0
    if v <= was then return was end
    redis.call('HSET', shards, k .. ':replicated', v)
    return v
end

-- dl_snapshot KEYS[1]=config ARGV: server_id, epoch, shard, version, snap_ref
-- Records a snapshot of the shard at `version` and trims the log entries it covers.
-- -> {old snapshot ref, trimmed log refs...} so the caller can delete those blobs.
local function dl_snapshot(keys, args)
    local P = load_run(keys)
    local sid, epoch, k = args[1], args[2], to_int(args[3], 'shard')
    local v, ref = to_int(args[4], 'version'), args[5]
    local cur = check_lease(P, sid, k, epoch, now_ms())
    local shards = P .. ':shards'
    local old = redis.call('HGET', shards, k .. ':snap')
    local oldv = tonumber(string.match(old, '^(%d+)%.'))
    if v > cur or v <= oldv then
        error('VERSION snapshot version ' .. v .. ' must be in (' .. oldv .. ', ' .. cur .. ']')
    end
    local keep, trimmed = {}, {old}
    for _, e in ipairs(split_csv(redis.call('HGET', shards, k .. ':log'))) do
        local ev = tonumber(string.match(e, '^(%d+)%.'))
        if ev <= v then trimmed[#trimmed + 1] = e else keep[#keep + 1] = e end
    end
    redis.call('HSET', shards, k .. ':snap', ref, k .. ':log', table.concat(keep, ','))
    return trimmed
end

-- dl_mark_corrupt KEYS[1]=config ARGV: server_id, epoch, shard, version, key, reason
-- The lease holder found the shard's durable state unusable (a blob fails its checksum or is missing,
-- or the replay does not give k:digest): marks it in dl:{R}:shards (k:corrupt = the key, k:corrupt_reason,
-- k:corrupt_ms) and records one 'corrupt' event. Fenced like every server write. Marking the same key
-- again changes nothing and records nothing (a restarted server finds the mark and does not retry).
-- -> 1 when newly marked, 0 when it already was.
local function dl_mark_corrupt(keys, args)
    local P = load_run(keys)
    local sid, epoch, k = args[1], args[2], to_int(args[3], 'shard')
    local v, key, reason = to_int(args[4], 'version'), args[5] or '', args[6] or ''
    if key == '' then error('BADARG the corrupt key is required') end
    local cur = check_lease(P, sid, k, epoch, now_ms())
    if cur ~= v then
        error('VERSION shard ' .. k .. ' is at version ' .. cur .. ', not ' .. v .. ': load it again')
    end
    local shards = P .. ':shards'
    if redis.call('HGET', shards, k .. ':corrupt') == key then return 0 end
    redis.call('HSET', shards, k .. ':corrupt', key, k .. ':corrupt_reason', reason, k .. ':corrupt_ms', now_ms())
    redis.call('HINCRBY', P .. ':state', 'corruptions', 1)
    event(P, 'corrupt', {'shard', k, 'version', v, 'key', key, 'reason', reason, 'server', sid})
    return 1
end

-- ---------------------------------------------------------------------------------------------------
-- functions: audit and operations

-- dl_reject KEYS[1]=config ARGV: reporter, worker, code, message, shard, round
local function dl_reject(keys, args)
    local P = load_run(keys)
    record_reject(P, {'by', args[1] or '', 'worker', args[2] or '', 'code', args[3] or '',
                      'message', args[4] or '', 'shard', args[5] or -1, 'round', args[6] or -1})
    return 'OK'
end

-- dl_kick KEYS[1]=config ARGV: worker_id
local function dl_kick(keys, args)
    local P = load_run(keys)
    if not get_worker(P, args[1]) then error('UNKNOWN_WORKER no live worker ' .. tostring(args[1])) end
    operator_gate(P)
    remove_member(P, args[1], 'kicked')
    return 'OK'
end

-- dl_set KEYS[1]=config ARGV: (field, value)* among the tunables below. Each goes to dl:{R}:tunables;
-- target_workers (the workers a barrier waits for) is the operator's expected_workers there and also
-- resets the live target in dl:{R}:state, which then follows the membership again.
local TUNABLES = {outer_lr = 'num', outer_momentum = 'num', nesterov = 'bool', min_workers = 'int',
                  target_workers = 'int', heartbeat_timeout_ms = 'int', max_staleness = 'int'}
local function dl_set(keys, args)
    local P = load_run(keys)
    if #args == 0 or #args % 2 ~= 0 then error('BADARG expected field value pairs') end
    for i = 1, #args, 2 do
        local kind = TUNABLES[args[i]]
        if not kind then error('BADARG ' .. tostring(args[i]) .. ' is not a tunable') end
        local v = to_num(args[i + 1], args[i])
        if kind == 'int' and (v ~= math.floor(v) or v < 0) then error('BADARG ' .. args[i] .. ' must be a non-negative integer') end
        if kind == 'bool' and v ~= 0 and v ~= 1 then error('BADARG ' .. args[i] .. ' must be 0 or 1') end
        if args[i] == 'outer_lr' and v <= 0 then error('BADARG outer_lr must be positive') end
        if args[i] == 'outer_momentum' and (v < 0 or v >= 1) then error('BADARG outer_momentum must be in [0, 1)') end
    end
    local fields, tun = {}, {}
    for i = 1, #args, 2 do
        fields[#fields + 1] = args[i]; fields[#fields + 1] = args[i + 1]
        tun[#tun + 1] = args[i] == 'target_workers' and 'expected_workers' or args[i]
        tun[#tun + 1] = args[i + 1]
    end
    operator_gate(P)
    redis.call('HSET', tunables_key(P), unpack(tun))
    for i = 1, #args, 2 do
        if args[i] == 'target_workers' then redis.call('HSET', P .. ':state', 'target_workers', args[i + 1]) end
    end
    for f = 0, num_fragments(P) - 1 do barrier_try_close(P, f) end
    event(P, 'set', fields)
    return 'OK'
end

-- dl_shutdown KEYS[1]=config: workers see status 'shutdown' in their next heartbeat and stop
local function dl_shutdown(keys, args)
    local P = load_run(keys)
    operator_gate(P)
    redis.call('HSET', tunables_key(P), 'status', 'shutdown')
    event(P, 'shutdown', {})
    return 'OK'
end

-- Take shard k's lease away (new epoch, no owner): its holder drops its cache at its next beat and
-- whoever takes the shard next loads it from Redis as it is now.
local function revoke_lease(P, k)
    local shards = P .. ':shards'
    redis.call('HINCRBY', shards, k .. ':epoch', 1)
    redis.call('HSET', shards, k .. ':owner', '', k .. ':expiry', 0)
    redis.call('HINCRBY', P .. ':state', 'lease_changes', 1)
end

local function clear_corrupt(P, k)
    redis.call('HDEL', P .. ':shards', k .. ':corrupt', k .. ':corrupt_reason', k .. ':corrupt_ms')
end

-- dl_repair KEYS[1]=config ARGV: how, source, version, nshards, then per shard k in order:
--   expect_version, expect_snap, expect_log, snap_ref, digest
-- Installs new durable state for every shard (coordinator repair): shard k becomes version `version`,
-- the snapshot blob snap_ref (written by the caller) with no log entries, and digest. `version` must be
-- above every shard's version and every open round: versions never go backwards, so whatever a worker
-- or server holds is older than the new state and the usual checks send them to it (STALE, a new lease
-- epoch). Every fragment's open round becomes `version` (the old open barrier is deleted: its waiters
-- read `expired` and fetch again), every lease is revoked, the corrupt marks are cleared. Refused with
-- VERSION when a shard changed since the caller read it (expect_*), and for async runs (submissions in
-- flight are numbered by version). -> the new version.
local function dl_repair(keys, args)
    local P = load_run(keys)
    local how, source = args[1] or '', args[2] or ''
    local V, S = to_int(args[3], 'version'), to_int(args[4], 'nshards')
    if redis.call('HGET', keys[1], 'mode') == 'async' then
        error('BADARG run ' .. P .. ' is async: submissions in flight are numbered by version and cannot be ' ..
              'renumbered; export it with `coordinator checkpoint save` (or take a saved checkpoint) and ' ..
              '`coordinator init --run NEW --from-checkpoint FILE`')
    end
    if S ~= tonumber(redis.call('HGET', keys[1], 'shards')) or #args ~= 4 + 5 * S then
        error('BADARG expected 5 values for each of the run\'s ' .. tostring(redis.call('HGET', keys[1], 'shards')) ..
              ' shards')
    end
    local shards, state = P .. ':shards', P .. ':state'
    local corrupt = {}
    for k = 0, S - 1 do
        local a = 4 + 5 * k
        local cur = redis.call('HMGET', shards, k .. ':version', k .. ':snap', k .. ':log', k .. ':corrupt')
        if cur[1] ~= args[a + 1] or cur[2] ~= args[a + 2] or (cur[3] or '') ~= args[a + 3] then
            error('VERSION shard ' .. k .. ' changed while it was being verified (version ' .. tostring(cur[1]) ..
                  ', expected ' .. args[a + 1] .. '); run coordinator repair again (a run that keeps committing ' ..
                  'is served from memory: stop its workers first, or let the next snapshot replace the bad entry)')
        end
        if tonumber(cur[1]) >= V then error('BADARG version ' .. V .. ' is not above shard ' .. k .. "'s " .. cur[1]) end
        if cur[4] then corrupt[#corrupt + 1] = k end
    end
    local F = num_fragments(P)
    local from = 0
    for f = 0, F - 1 do
        local r = tonumber(redis.call('HGET', state, 'round:' .. f))
        if r >= V then error('BADARG version ' .. V .. ' is not above the open round ' .. r .. ' of fragment ' .. f) end
        if r > from then from = r end
    end
    operator_gate(P)
    local now = now_ms()
    for k = 0, S - 1 do
        local a = 4 + 5 * k
        redis.call('HSET', shards, k .. ':version', V, k .. ':snap', args[a + 4], k .. ':log', '',
                   k .. ':digest', args[a + 5], k .. ':committed_ms', now)
        clear_corrupt(P, k)
        revoke_lease(P, k)
    end
    for f = 0, F - 1 do
        redis.call('DEL', barrier_key(P, f, redis.call('HGET', state, 'round:' .. f)), barrier_key(P, f, V))
        redis.call('HSET', state, 'round:' .. f, V)
        redis.call('HSET', barrier_key(P, f, V), 'state', 'open', 'opened_ms', now)
    end
    -- waiters look at their barrier now instead of at their next poll
    for _, w in ipairs(redis.call('HKEYS', P .. ':workers')) do
        redis.call('RPUSH', P .. ':wake:' .. w, 'repair')
        redis.call('EXPIRE', P .. ':wake:' .. w, 600)
    end
    redis.call('HINCRBY', state, 'repairs', 1)
    event(P, 'repair', {'how', how, 'source', source, 'version', V, 'from_round', from,
                        'corrupt_shards', table.concat(corrupt, ',')})
    return V
end

-- dl_unmark_corrupt KEYS[1]=config ARGV: (shard, expected corrupt key)*
-- coordinator repair found these marked shards' durable state sound after all (restored by hand, or
-- a transient read failure): clears the marks and revokes the leases, so the shards load again.
local function dl_unmark_corrupt(keys, args)
    local P = load_run(keys)
    if #args == 0 or #args % 2 ~= 0 then error('BADARG expected shard, key pairs') end
    for i = 1, #args, 2 do
        local k = to_int(args[i], 'shard')
        local cur = redis.call('HGET', P .. ':shards', k .. ':corrupt')
        if cur ~= args[i + 1] then
            error('VERSION shard ' .. k .. ' is marked ' .. tostring(cur) .. ', not ' .. args[i + 1] ..
                  '; run coordinator repair again')
        end
    end
    operator_gate(P)
    for i = 1, #args, 2 do
        local k = tonumber(args[i])
        clear_corrupt(P, k)
        revoke_lease(P, k)
        event(P, 'repair', {'how', 'verified', 'shard', k, 'key', args[i + 1]})
    end
    return 'OK'
end

-- dl_status KEYS[1]=config -> JSON document of the whole run (read-only)
local function dl_status(keys, args)
    local P = load_run(keys)
    local now = now_ms()
    local function hash(key)
        local t, all = {}, redis.call('HGETALL', key)
        for i = 1, #all, 2 do t[all[i]] = all[i + 1] end
        return t
    end
    local config = hash(P .. ':config')
    config.secret = nil
    -- 'state' shows both hashes, as it did when one held everything (the dashboard and tools read it)
    local state = hash(P .. ':state')
    for k, v in pairs(hash(tunables_key(P))) do state[k] = v end
    local workers = {}
    local all = redis.call('HGETALL', P .. ':workers')
    for i = 1, #all, 2 do
        local rec = cmsgpack.unpack(all[i + 1])
        local hb = tonumber(redis.call('ZSCORE', P .. ':heartbeats', all[i])) or 0
        rec.id = all[i]
        rec.heartbeat_age_ms = now - hb
        workers[#workers + 1] = rec
    end
    local servers = {}
    all = redis.call('HGETALL', P .. ':servers')
    for i = 1, #all, 2 do
        local rec = cmsgpack.unpack(all[i + 1])
        rec.id = all[i]
        rec.age_ms = now - (rec.last or 0)
        servers[#servers + 1] = rec
    end
    local sh = hash(P .. ':shards')
    local shards = {}
    local S = tonumber(config.shards) or 0
    for k = 0, S - 1 do
        shards[#shards + 1] = {shard = k, version = tonumber(sh[k .. ':version']), owner = sh[k .. ':owner'],
            epoch = tonumber(sh[k .. ':epoch']), lease_left_ms = (tonumber(sh[k .. ':expiry']) or 0) - now,
            digest = sh[k .. ':digest'], snap = sh[k .. ':snap'], log = sh[k .. ':log'],
            corrupt = sh[k .. ':corrupt'], corrupt_reason = sh[k .. ':corrupt_reason']}
    end
    local barriers = {}
    for f = 0, (tonumber(config.fragments) or 1) - 1 do
        local r = state['round:' .. f]
        local b = hash(barrier_key(P, f, r))
        local arrived = {}
        for key, _ in pairs(b) do
            local w = string.match(key, '^a:(.+)$')
            if w then arrived[#arrived + 1] = w end
        end
        table.sort(arrived)
        barriers[#barriers + 1] = {frag = f, round = tonumber(r), arrived = arrived}
    end
    return cjson.encode({run = P, now_ms = now, config = config, state = state, workers = workers,
                         servers = servers, shards = shards, barriers = barriers})
end

-- ---------------------------------------------------------------------------------------------------
-- registration. Errors raised with error('CODE ...') reach the client as '-CODE ...' replies.

local function wrap(fn)
    return function(keys, args)
        local ok, res = pcall(fn, keys, args)
        if ok then return res end
        if type(res) == 'table' and res.err then return res end
        local msg = tostring(res)
        -- strip the "user_function:123: " position Lua prepends to error strings
        msg = string.gsub(msg, '^[^:]*:%d+: ', '')
        return fail(msg)
    end
end

local function reg(name, fn, readonly)
    local spec = {function_name = name, callback = wrap(fn)}
    if readonly then spec.flags = {'no-writes'} end
    redis.register_function(spec)
end

reg('dl_version', dl_version, true)
reg('dl_init', dl_init)
reg('dl_register', dl_register)
reg('dl_deregister', dl_deregister)
reg('dl_heartbeat', dl_heartbeat)
reg('dl_member', dl_member, true)
reg('dl_reap', dl_reap)
reg('dl_arrive', dl_arrive)
reg('dl_barrier', dl_barrier)
reg('dl_drop', dl_drop)
reg('dl_submit', dl_submit)
reg('dl_server_beat', dl_server_beat)
reg('dl_server_leave', dl_server_leave)
reg('dl_commit', dl_commit)
reg('dl_replicated', dl_replicated)
reg('dl_snapshot', dl_snapshot)
reg('dl_mark_corrupt', dl_mark_corrupt)
reg('dl_reject', dl_reject)
reg('dl_kick', dl_kick)
reg('dl_set', dl_set)
reg('dl_shutdown', dl_shutdown)
reg('dl_repair', dl_repair)
reg('dl_unmark_corrupt', dl_unmark_corrupt)
reg('dl_status', dl_status, true)
