-- lua/10_helpers.lua: small helpers: arguments, events, the run, tunables, worker records (used by every other file).
-- Part of the diloco Functions library: the Makefile joins lua/*.lua in name order into
-- build/diloco.lua, which every binary embeds (lua/00_header.lua has the library's rules).

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

-- The run's clock, in ms: Redis's TIME plus the run's clock_skew_ms, never before the newest time a beat
-- recorded (clock_ms; both in dl:{R}:state). Heartbeats, leases, barriers and the reaper are timed on it.
-- Why not TIME alone: the clock of Redis's host can step back (NTP, an operator's `date -s`, a VM resumed
-- from a snapshot, a failover to a replica whose host's clock is behind). Every time recorded before such a
-- step (the heartbeats, the lease expiries) then lay in the future, and a worker or shard-server that died
-- after it was found dead that much later: an hour later for a step of an hour. Now a step back stops the
-- run's clock at the newest time recorded until the next beat adds the step to the skew (clock_record); the
-- clock goes on from there. A step forward needs nothing here: every member and server looks silent at
-- once, an outage that the reaper and the lease beats forgive (silence_forgiven, forgive_outage).
-- Read-only: any function may call it. run_clock returns the time and the step back it found (0: none), for
-- the beats to record; run_now the time alone (one value: a second one would become an extra argument of the
-- call it is the last argument of, as of an HSET).
local function run_clock(P)
    local st = redis.call('HMGET', P .. ':state', 'clock_skew_ms', 'clock_ms')
    local now, last = now_ms() + (tonumber(st[1]) or 0), tonumber(st[2]) or 0
    if now < last then return last, last - now end
    return now, 0
end

local function run_now(P)
    local now = run_clock(P)
    return now
end

-- Records run_clock's time and the step back it found (added to the skew; a step of a second or more is a
-- `clock_back` event). The beats (dl_heartbeat, dl_server_beat) call it, every live member and server every
-- few seconds, as their last write: after every check, the ACL's included (a worker user calling
-- dl_server_beat is refused before it); a field or two over the ones they replace (they are allow-oom).
local function clock_record(P, now, step)
    local state = P .. ':state'
    if step > 0 then
        redis.call('HINCRBY', state, 'clock_skew_ms', step)
        if step >= 1000 then event(P, 'clock_back', {'stepped_back_ms', step}) end
    end
    redis.call('HSET', state, 'clock_ms', now)
end

-- The keys every run has from dl_init on (dl:{R}:config is load_run's own check): without one of them the
-- functions would make it anew, empty, and go on with a run that lost its state: a shard's version, digest
-- and log gone and its lease epochs starting again at 1 (a fencing token reused), the round counters at 0.
-- A Redis whose maxmemory-policy evicts (allkeys-lru, ...) drops keys at random when it is full, and an
-- operator's DEL drops one: LOST, before any write, names what is missing and the eviction policy if it
-- evicts. One EXISTS per call (the worker, shard-server and viewer ACL users may run it).
local RUN_KEYS = {'state', 'tunables', 'shards'}
local function eviction_policy()
    local info = redis.pcall('INFO', 'memory')
    if type(info) ~= 'string' then return nil end
    return string.match(info, 'maxmemory_policy:([%w-]+)')
end

local function check_run_whole(P)
    local names = {}
    for i, k in ipairs(RUN_KEYS) do names[i] = P .. ':' .. k end
    if redis.call('EXISTS', unpack(names)) == #names then return end
    local missing = {}
    for _, key in ipairs(names) do
        if redis.call('EXISTS', key) == 0 then missing[#missing + 1] = key end
    end
    local policy = eviction_policy()
    local why = 'deleted: an operator\'s DEL or UNLINK?'
    if policy and policy ~= 'noeviction' then
        why = 'evicted: this Redis\'s maxmemory-policy is ' .. policy .. ', which drops keys when it is full; ' ..
              'set noeviction (CONFIG SET maxmemory-policy noeviction, docs/deploy.md)'
    end
    local name = string.match(P, '^dl:{(.*)}$') or P
    error('LOST ' .. table.concat(missing, ', ') .. ' missing (' .. why .. '): run \'' .. name .. '\' cannot go ' ..
          'on; start it again from its newest checkpoint (`coordinator init --force --run ' .. name ..
          ' --from-checkpoint FILE`, docs/checkpoints.md)')
end

local function load_run(keys)
    local P = prefix_of(keys[1])
    local v = redis.call('HGET', keys[1], 'lib_version')
    if not v then
        local name = string.match(P, '^dl:{(.*)}$') or P
        -- (a run whose config an evicting Redis dropped is not there either: say the likely cause)
        local policy = eviction_policy()
        local evicts = ''
        if policy and policy ~= 'noeviction' then
            evicts = ' (if it existed, it may have been evicted: this Redis\'s maxmemory-policy is ' .. policy ..
                     ', which drops keys when it is full; set noeviction, docs/deploy.md)'
        end
        error('NORUN run \'' .. name .. '\' does not exist in this Redis' .. evicts .. '; run `coordinator init ' ..
              '--run ' .. name .. '` first')
    end
    -- a run made by another library version keeps its keys differently (version 1: the operator's
    -- settings in dl:{R}:state): reading it with these functions would silently use defaults
    if v ~= LIB_VERSION then
        error('OLDRUN run ' .. P .. ' was created by function library version ' .. v .. ', this is version ' ..
              LIB_VERSION .. '; finish it with the binaries of that release (or export a checkpoint with them ' ..
              'and init a new run from it)')
    end
    check_run_whole(P)
    return P
end

-- The caller loaded the run made at `made` (its config's created_ms; nil or '': not checked). A run made
-- again under the same name since (coordinator init --force) is another run: RECREATED.
local function check_made_at(P, config, made)
    if made == nil or made == '' then return end
    local now_made = redis.call('HGET', config, 'created_ms')
    if now_made and now_made ~= made then
        local name = string.match(P, '^dl:{(.*)}$') or P
        error('RECREATED run \'' .. name .. '\' was made again (coordinator init --force) at ' .. now_made ..
              ' ms; the caller loaded the one made at ' .. made .. ' ms')
    end
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

-- worker records are msgpack maps: {inc, host, joined = {f -> round}, registered, speed, loss, step, tokens, h};
-- speed and loss are -1 until the worker reports one (from registering to its first heartbeat that has it)
local function get_worker(P, w)
    local raw = redis.call('HGET', P .. ':workers', w)
    if not raw then return nil end
    return cmsgpack.unpack(raw)
end

local function put_worker(P, w, rec)
    redis.call('HSET', P .. ':workers', w, cmsgpack.pack(rec))
end

-- How many departed incarnations dl:{R}:state remembers (gone:<w> = "why:inc", written by remove_member for an
-- evicted or kicked one, so that its next call is told why it is no member): a worker id never seen again (the
-- default <hostname>-<pid> of a machine that was preempted) kept its field for ever, one per departure over a
-- run of weeks. An incarnation's next call comes within a heartbeat or two of its departure; one older than the
-- newest GONE_KEPT is told only that it is no member. Trimmed in batches: down to the newest GONE_KEPT
-- whenever the hash holds GONE_KEPT + GONE_SLACK fields or more (its other fields are some twenty counters and
-- one round per fragment), so a departure costs one HLEN, and about one in a hundred a read of the hash.
local GONE_KEPT, GONE_SLACK = 1000, 128
local function trim_gone(P)
    local state = P .. ':state'
    if redis.call('HLEN', state) < GONE_KEPT + GONE_SLACK then return end
    local all, gone = redis.call('HGETALL', state), {}
    for i = 1, #all, 2 do
        if string.sub(all[i], 1, 5) == 'gone:' then
            -- the incarnation numbers registrations in order: the smallest departed first, near enough
            gone[#gone + 1] = {all[i], tonumber(string.match(all[i + 1], ':(%d+)$')) or 0}
        end
    end
    local keep = GONE_KEPT
    if #gone <= keep then return end
    table.sort(gone, function(a, b) return a[2] < b[2] end)
    local drop = {}
    for i = 1, #gone - keep do drop[#drop + 1] = gone[i][1] end
    for i = 1, #drop, 500 do redis.call('HDEL', state, unpack(drop, i, math.min(i + 499, #drop))) end
end

local function barrier_key(P, f, r) return P .. ':f' .. f .. ':r' .. r end

-- Round r of fragment f closed: the barrier BARRIERS_KEPT rounds before it goes (lua/00_header.lua). EXPIRE
-- with 0 deletes a key: the worker and shard-server ACL users, whose calls close barriers, have EXPIRE and
-- not DEL.
local function drop_old_barrier(P, f, r)
    local kept = tonumber(redis.call('HGET', P .. ':config', 'barriers_kept')) or BARRIERS_KEPT
    if kept >= 1 and r - kept >= 0 then redis.call('EXPIRE', barrier_key(P, f, r - kept), 0) end
end

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

