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
               'rejections', 0, 'duplicates', 0, 'deaths', 0, 'joins', 0, 'incarnations', 0, unpack(st))
    local replid = replication_id() -- the reaper's reference: a failover changes it (control_plane_back)
    if replid then redis.call('HSET', P .. ':state', 'replid', replid) end
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
-- dl_build KEYS[1]=config -> LIB_BUILD (read-only; any run name: the library is the server's)
local function dl_build(keys, args) return LIB_BUILD end

-- ---------------------------------------------------------------------------------------------------
-- functions: workers

-- A registration's `held` ("shard:version,...": the versions of the shards the worker's parameters were
-- trained from since it last took versions), checked: each shard of the run once at most, versions from 0.
-- -> the same string, or error BADARG.
local function check_held(held, shards)
    local seen = {}
    for pair in string.gmatch(held, '[^,]+') do
        local k, v = string.match(pair, '^(%d+):(%d+)$')
        k = tonumber(k)
        if not k or k >= shards or seen[k] then
            error('BADARG held versions must be shard:version pairs, each shard of the run (0 .. ' .. (shards - 1) ..
                  ') once at most, got ' .. held)
        end
        seen[k] = tonumber(v)
    end
    return held
end

-- dl_register KEYS[1]=config ARGV: worker_id, host, sync_every [, group size [, steps [, held [, created_ms]]]]
-- -> {incarnation, lib_version, {round per fragment}, {joined round per fragment}}
-- A group size R > 1 registers a process group (lua/15_groups.lua) as rank 0; its other ranks join with
-- dl_group_join. R may not exceed the run's shards (each rank moves at least one).
-- steps (the inner steps the process trained before this registration) and held (check_held) are only
-- recorded, in the join event: a worker that registers again drops the steps trained since it last took
-- versions, from the versions it held, and a replay of the run needs both (tests/tools/ref_async.c).
-- created_ms (absent or '': not checked): the config's, when the worker loaded the run; a run made again
-- under its name since refuses it RECREATED (check_made_at).
local function dl_register(keys, args)
    local P = load_run(keys)
    check_made_at(P, keys[1], args[7])
    local w, host, h = args[1], args[2] or '', tonumber(args[3] or '0') or 0
    if w == nil or w == '' or string.find(w, '[,:%s]') then
        error('BADARG worker id must be non-empty without commas, colons or spaces')
    end
    local size = to_int(args[4] or '1', 'group size')
    local shards = tonumber(redis.call('HGET', keys[1], 'shards')) or 1
    if size < 1 or size > GROUP_MAX or size > shards then
        error('BADARG a group of ' .. size .. ' processes: a group has 1 to ' .. math.min(GROUP_MAX, shards) ..
              ' (each process moves whole shards and run ' .. P .. ' has ' .. shards .. ')')
    end
    local steps = args[5] and to_int(args[5], 'steps')
    if steps and steps < 0 then error('BADARG steps must be 0 or more, got ' .. steps) end
    local held = args[6] and check_held(args[6], shards)
    check_running(P)
    local now = run_now(P)
    reap(P, now)
    if get_worker(P, w) then remove_member(P, w, 'replaced') end
    redis.call('HDEL', P .. ':state', 'gone:' .. w)

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
    local rec = {inc = inc, host = host, joined = joined, registered = now, speed = -1, loss = -1,
                 step = 0, tokens = 0, h = h, sync_every = h}
    group_fields(rec, size, now)
    put_worker(P, w, rec)
    redis.call('ZADD', P .. ':heartbeats', now, w)
    redis.call('HINCRBY', state, 'joins', 1)
    local fields = {'worker', w, 'inc', inc, 'host', host, 'joined', joined[1], 'group', size}
    if steps then fields[#fields + 1] = 'steps'; fields[#fields + 1] = steps end
    if held then fields[#fields + 1] = 'held'; fields[#fields + 1] = held end
    event(P, 'join', fields)
    return {inc, LIB_VERSION, rounds, joined}
end

-- dl_group_join KEYS[1]=config ARGV: worker_id, incarnation, rank, group size -> OK
-- Rank `rank` (1 .. size-1) of the group that rank 0 registered as worker_id with that incarnation joins
-- it. Refused (GROUP) once the group arrived at a barrier: a rank cannot join a group that already
-- synced (restart every rank), nor join twice; BADARG when the sizes disagree.
local function dl_group_join(keys, args)
    local P = load_run(keys)
    local w, inc = args[1], args[2]
    local rank, size = to_int(args[3], 'rank'), to_int(args[4], 'group size')
    local now = run_now(P)
    reap(P, now)
    check_running(P)
    local rec = check_member(P, w, inc, 'dl_group_join', {'rank', rank})
    if group_size(rec) ~= size then
        error('BADARG worker ' .. w .. ' was registered as a group of ' .. group_size(rec) ..
              ' process(es), this rank says ' .. size .. ': every rank must be given the same group size')
    end
    if rank < 1 or rank >= size then error('BADARG rank ' .. rank .. ' of a group of ' .. size .. ' cannot join') end
    if rec.synced then
        error('GROUP worker ' .. w .. ' (incarnation ' .. inc .. ') has already synced: a rank cannot join a ' ..
              'group that already synced; restart every rank of the group')
    end
    if rec.gjoin[rank + 1] == 1 then error('GROUP rank ' .. rank .. ' of worker ' .. w .. ' joined already') end
    rec.gjoin[rank + 1] = 1
    beat_rank(P, w, rec, rank, now)
    put_worker(P, w, rec)
    return 'OK'
end

-- dl_deregister KEYS[1]=config ARGV: worker_id, incarnation [, rank]
-- Any rank of a group ends the whole group. A rank finding its group gone already (another rank left
-- first) gets GONE, not a rejection: every rank of a group that stops leaves this way. A group that
-- leaves is remembered (group_left) so that its other ranks' next heartbeat learns it is gone without
-- counting a rejection.
local function dl_deregister(keys, args)
    local P = load_run(keys)
    if args[3] ~= nil then
        local rec = get_worker(P, args[1])
        if not rec or tostring(rec.inc) ~= tostring(args[2]) then return 'GONE' end
    end
    local rec = check_member(P, args[1], args[2], 'dl_deregister')
    remove_member(P, args[1], 'left')
    if group_size(rec) > 1 then group_left(P, args[1], rec.inc) end
    return 'OK'
end

-- The progress a worker reports with its heartbeat, checked before the heartbeat writes anything. A
-- speed or loss of -1 is none yet (the worker has timed no step, or its host reported no loss).
local function parse_beat(args)
    return {speed = to_num(args[3] or -1, 'speed'), loss = to_num(args[4] or -1, 'loss'),
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

-- dl_heartbeat KEYS[1]=config ARGV: worker_id, incarnation, steps_per_s, loss, step, tokens [, rank [, created_ms]]
-- -> {status, H for this worker (0 = keep yours), {round per fragment}}
-- A rank of a group that one of its ranks ended (dl_deregister) gets GONE, not counted as a rejection.
-- Checks the arguments, then applies the membership rule (reap, then is the caller a member), then
-- writes the caller's one record. Every rank of a group beats with its rank: the group's tokens are
-- the sum of its ranks', its speed, loss and step rank 0's.
local function dl_heartbeat(keys, args)
    local P = load_run(keys)
    check_made_at(P, keys[1], args[8])
    local w, inc = args[1], args[2]
    local beat = parse_beat(args)
    local rank = to_int(args[7] or '0', 'rank')
    local now, step = run_clock(P)
    reap(P, now)
    if left_group(P, w, inc) then
        error('GONE worker ' .. w .. ' (incarnation ' .. inc .. ') left the run: its group was ended by one of its ranks')
    end
    local rec = check_member(P, w, inc, 'dl_heartbeat')
    check_rank(w, rec, rank)
    local h = nil
    if rank == 0 then
        h = dylu_h(P, w, beat.speed)
        rec.speed, rec.loss, rec.step, rec.tokens = beat.speed, beat.loss, beat.step, beat.tokens
        if h then rec.h = h end
    end
    rec.last = now
    if group_size(rec) > 1 then
        rec.gtok[rank + 1] = beat.tokens
        local sum = 0
        for q = 1, rec.group do sum = sum + rec.gtok[q] end
        rec.tokens = sum
    end
    beat_rank(P, w, rec, rank, now)
    put_worker(P, w, rec)
    clock_record(P, now, step)
    return {tunable(P, 'status'), h or 0, fragment_rounds(P)}
end

-- dl_member KEYS[1]=config ARGV: worker_id -> incarnation, or why it is gone ("kicked:<inc>", "evicted:<inc>"),
-- or nil (read-only; used by shard-servers)
local function dl_member(keys, args)
    local P = load_run(keys)
    local rec = get_worker(P, args[1])
    if rec then return rec.inc end
    -- why the id's last incarnation is gone, "kicked:<inc>" or "evicted:<inc>" (remove_member), so that a
    -- shard-server's refusal can say it; nil (no member) otherwise
    return redis.call('HGET', P .. ':state', 'gone:' .. args[1]) or false
end

-- dl_reap KEYS[1]=config -> number of members evicted
local function dl_reap(keys, args)
    local P = load_run(keys)
    return reap(P, run_now(P))
end

