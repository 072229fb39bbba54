-- lua/60_operations.lua: functions: audit and operations (rejections, kick, set, shutdown, corrupt marks, repair, status).
-- Part of the diloco Functions library: the Makefile joins lua/*.lua in name order into
-- build/diloco.lua, which every binary embeds (lua/00_header.lua has the library's rules).

-- ---------------------------------------------------------------------------------------------------
-- functions: audit and operations

-- dl_reject KEYS[1]=config ARGV: reporter, worker, code, message, shard, round
local function dl_reject(keys, args)
    local P = load_run(keys)
    record_reject(P, {'by', args[1] or '', 'worker', args[2] or '', 'code', args[3] or '',
                      'message', args[4] or '', 'shard', args[5] or -1, 'round', args[6] or -1})
    return 'OK'
end

-- dl_duplicate KEYS[1]=config ARGV: reporter, worker, shard, round
-- A worker sent again a push of a round that has already committed (after a failover or a lost reply:
-- the worker did not see the commit). Nothing is wrong: it is counted in `duplicates`, not as a
-- rejection, and not recorded as an event (the worker fetches the current version and goes on).
local function dl_duplicate(keys, args)
    local P = load_run(keys)
    redis.call('HINCRBY', P .. ':state', 'duplicates', 1)
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
-- resets the live target in dl:{R}:state, which then follows the membership again. Both worker counts
-- are 1 or more (WORKER_COUNTS), and min_workers may not end above expected_workers (check_worker_bounds).
local TUNABLES = {outer_lr = 'num', outer_momentum = 'num', nesterov = 'bool', min_workers = 'int',
                  target_workers = 'int', heartbeat_timeout_ms = 'int', max_staleness = 'int'}

-- The worker counts are 1 or more, as init's --workers and --min-workers and /control's
-- update_num_workers have them (docs/http.md): one rule, whichever client calls.
local WORKER_COUNTS = {min_workers = true, target_workers = true}

-- min_workers is the floor of the expected workers (bounded_target): above them, every barrier would
-- wait for workers the run never expects, for ever. The check is of the values this call leaves, a
-- field it does not set standing at its stored value, so no two calls can get there either.
local function check_worker_bounds(P, args)
    local minw, expected = tunable(P, 'min_workers'), tunable(P, 'expected_workers')
    local set_min, set_exp = false, false
    for i = 1, #args, 2 do
        if args[i] == 'min_workers' then minw, set_min = args[i + 1], true end
        if args[i] == 'target_workers' then expected, set_exp = args[i + 1], true end
    end
    minw, expected = tonumber(minw) or 1, tonumber(expected)
    if not expected or minw <= expected then return end
    if set_min and set_exp then
        error('BADARG min_workers ' .. minw .. ' is above the expected workers (target_workers, num_workers) ' ..
              expected .. ' set with it: min_workers must be <= num_workers')
    elseif set_exp then
        error('BADARG expected workers (target_workers, num_workers) ' .. expected .. ' is below the run\'s ' ..
              'min_workers ' .. minw .. ': lower min_workers first (coordinator control set-min-workers N, or ' ..
              'min_workers in the same update_num_workers request)')
    end
    error('BADARG min_workers ' .. minw .. ' is above the run\'s expected workers (target_workers, num_workers) ' ..
          expected .. ': raise those first (coordinator control set-workers N, or num_workers in the same ' ..
          'update_num_workers request), or set min_workers <= ' .. expected)
end

local function dl_set(keys, args)
    local P = load_run(keys)
    if #args == 0 or #args % 2 ~= 0 then error('BADARG expected field value pairs') end
    for i = 1, #args, 2 do
        local kind = TUNABLES[args[i]]
        if not kind then error('BADARG ' .. tostring(args[i]) .. ' is not a tunable') end
        local v = to_num(args[i + 1], args[i])
        if kind == 'int' and (v ~= math.floor(v) or v < 0) then error('BADARG ' .. args[i] .. ' must be a non-negative integer') end
        if WORKER_COUNTS[args[i]] and v < 1 then
            error('BADARG ' .. args[i] .. ' must be an integer >= 1 (a round without workers never closes)')
        end
        if kind == 'bool' and v ~= 0 and v ~= 1 then error('BADARG ' .. args[i] .. ' must be 0 or 1') end
        if args[i] == 'outer_lr' and v <= 0 then error('BADARG outer_lr must be positive') end
        if args[i] == 'outer_momentum' and (v < 0 or v >= 1) then error('BADARG outer_momentum must be in [0, 1)') end
        local window = tonumber(redis.call('HGET', keys[1], 'rebase_window')) or 0
        if args[i] == 'max_staleness' and window > 0 and (v < 1 or v > window) then
            error('BADARG max_staleness of this run (--async-rule rebase) must be in [1, ' .. window ..
                  ']: its shard-servers hold only the last ' .. window .. ' versions')
        end
    end
    check_worker_bounds(P, args)
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
-- -> OK, or ALREADY when the run was shut down before (nothing written: no gate, no second event)
local function dl_shutdown(keys, args)
    local P = load_run(keys)
    if tunable(P, 'status') == 'shutdown' then return 'ALREADY' end
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
    local now = run_now(P)
    for k = 0, S - 1 do
        local a = 4 + 5 * k
        redis.call('HSET', shards, k .. ':version', V, k .. ':snap', args[a + 4], k .. ':log', '',
                   k .. ':digest', args[a + 5], k .. ':digests', V .. ':' .. args[a + 5], k .. ':committed_ms', now)
        clear_corrupt(P, k)
        revoke_lease(P, k)
    end
    for f = 0, F - 1 do
        redis.call('DEL', barrier_key(P, f, redis.call('HGET', state, 'round:' .. f)), barrier_key(P, f, V))
        redis.call('HSET', state, 'round:' .. f, V)
        redis.call('HSET', barrier_key(P, f, V), 'state', 'open', 'opened_ms', now)
    end
    -- waiters look at their barrier now instead of at their next poll
    for _, w in ipairs(redis.call('HKEYS', P .. ':workers')) do wake_member(P, w, get_worker(P, w), 'repair') end
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
    local now = run_now(P)
    local function hash(key)
        local t, all = {}, redis.call('HGETALL', key)
        for i = 1, #all, 2 do t[all[i]] = all[i + 1] end
        return t
    end
    local config = hash(P .. ':config')
    config.secret = nil
    -- 'state' shows both hashes, as it did when one held everything (the dashboard and tools read it)
    local state = hash(P .. ':state')
    -- not the departed workers' gone:<w> (up to GONE_KEPT of them, lua/10_helpers.lua): what a status reader
    -- wants is in the counters (deaths) and the events; every poll of the dashboard would carry them all
    for k, _ in pairs(state) do
        if string.sub(k, 1, 5) == 'gone:' then state[k] = nil end
    end
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
        rec.token = nil -- (which process holds the id: check_server_process's, nothing to show)
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

