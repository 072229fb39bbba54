-- lua/30_workers.lua: functions: run lifecycle (dl_init, dl_version) and workers (register, deregister, heartbeat, member, reap).
-- Part of the diloco Functions library: the Makefile joins lua/*.lua in name order into
-- build/diloco.lua, which every binary embeds (lua/00_header.lua has the library's rules).

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
                   k .. ':digests', '0:' .. args[i + k], k .. ':next', 0)
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

