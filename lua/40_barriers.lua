-- lua/40_barriers.lua: functions: sync barriers (dl_arrive, dl_barrier, dl_drop) and async submissions (dl_submit).
-- Part of the diloco Functions library: the Makefile joins lua/*.lua in name order into
-- build/diloco.lua, which every binary embeds (lua/00_header.lua has the library's rules).

-- ---------------------------------------------------------------------------------------------------
-- functions: barriers

-- dl_arrive KEYS[1]=config ARGV: worker_id, incarnation, fragment, round [, rank]
-- -> {'closed'|'open', round, arrived count}
-- A rank of a process group arrives for itself (after its own pushes); the group arrives, and counts,
-- with its last rank (lua/15_groups.lua). Every rank of a group must have joined before any arrives.
local function dl_arrive(keys, args)
    local P = load_run(keys)
    local w, inc = args[1], args[2]
    local f, r = to_int(args[3], 'fragment'), to_int(args[4], 'round')
    local rank = to_int(args[5] or '0', 'rank')
    if f < 0 or f >= num_fragments(P) then error('BADARG fragment ' .. f .. ' does not exist') end
    local now = run_now(P)
    reap(P, now)
    check_running(P)
    local rec = check_member(P, w, inc, 'dl_arrive', {'frag', f, 'round', r})
    check_rank(w, rec, rank)
    local cur = tonumber(redis.call('HGET', P .. ':state', 'round:' .. f))
    if r ~= cur then
        error('STALE round ' .. r .. ' of fragment ' .. f .. ' is not open (open round is ' .. cur ..
              '); fetch the current parameters and start a new round')
    end
    check_group_joined(w, rec, 'arrives')
    local B = barrier_key(P, f, r)
    local whole = group_size(rec) <= 1 or group_arrived(B, w, rec, inc, rank)
    if group_size(rec) > 1 then rec.synced = true end
    if beat_rank(P, w, rec, rank, now) then put_worker(P, w, rec) end
    if not whole then
        local n = 0
        for _, k in ipairs(redis.call('HKEYS', B)) do if string.sub(k, 1, 2) == 'a:' then n = n + 1 end end
        return {'open', r, n}
    end
    redis.call('HSET', B, 'a:' .. w, inc)
    local closed = barrier_try_close(P, f)
    local n = 0
    if not closed then
        for _, k in ipairs(redis.call('HKEYS', B)) do if string.sub(k, 1, 2) == 'a:' then n = n + 1 end end
    end
    return {closed and 'closed' or 'open', r, n}
end

-- dl_barrier KEYS[1]=config ARGV: fragment, round [, missing [, worker_id [, rank]]]
-- -> {state, participants csv, dropped csv, open round of the fragment [, missing [, arrived]]}. Reaps
-- first, so a worker that waits on a barrier whose members died is released by its own polling. With a
-- third argument 1, also the number of live members the open barrier still waits for (joined <= round,
-- not arrived): a joiner waiting for the round to close learns that nobody is left to close it (0 when
-- not asked). With a worker id as fourth argument, also whether that worker's arrival is in the barrier
-- (1/0): a worker waiting on an open barrier without its arrival (the dl_arrive never got a reply, or
-- its write was lost with a Redis restart or failover) arrives again instead of waiting forever; with a
-- rank as fifth argument, whether that rank of the group arrived.
local function dl_barrier(keys, args)
    local P = load_run(keys)
    local f, r = to_int(args[1], 'fragment'), to_int(args[2], 'round')
    reap(P, run_now(P))
    local B = barrier_key(P, f, r)
    local st = redis.call('HMGET', B, 'state', 'participants', 'dropped')
    local cur = tonumber(redis.call('HGET', P .. ':state', 'round:' .. f))
    local state = st[1]
    if not state then
        if r < cur then state = 'expired' else state = 'none' end
    end
    if args[3] ~= '1' and args[4] == nil then return {state, st[2] or '', st[3] or '', cur} end
    local missing = 0
    if state == 'open' and args[3] == '1' then
        for _, w in ipairs(expected_members(P, f, r)) do
            if redis.call('HEXISTS', B, 'a:' .. w) == 0 then missing = missing + 1 end
        end
    end
    if args[4] == nil then return {state, st[2] or '', st[3] or '', cur, missing} end
    local field = 'a:' .. args[4]
    local rank = tonumber(args[5] or '-1') or -1
    if rank >= 0 then field = 'g:' .. args[4] .. ':' .. rank end  -- a rank of a group (-1: a worker)
    return {state, st[2] or '', st[3] or '', cur, missing, redis.call('HEXISTS', B, field)}
end

-- dl_waiting KEYS[1]=config ARGV: fragment, round, max
-- -> {missing, heartbeat_timeout_ms, id, heartbeat age ms, id, age, ...}: the live members the open barrier
-- (fragment, round) still waits for (joined <= round, not arrived), the first `max` of them named with the
-- time since their last heartbeat. A worker that has waited long at a barrier says whom it waits for
-- (worker/diloco/barrier.c): a member that died is waited for until the reaper evicts it, one heartbeat
-- timeout after its last beat, and a worker restarted under a new id (the default <host>-<pid>) waits for
-- its own old incarnation all that time. Read-only; {0, timeout} when the barrier is not open.
local function dl_waiting(keys, args)
    local P = load_run(keys)
    local f, r, max = to_int(args[1], 'fragment'), to_int(args[2], 'round'), to_int(args[3], 'max')
    local B = barrier_key(P, f, r)
    local out = {0, tonumber(tunable(P, 'heartbeat_timeout_ms')) or 0}
    if redis.call('HGET', B, 'state') ~= 'open' then return out end
    local now = run_now(P)
    for _, w in ipairs(expected_members(P, f, r)) do
        if redis.call('HEXISTS', B, 'a:' .. w) == 0 then
            out[1] = out[1] + 1
            if out[1] <= max then
                local beat = tonumber(redis.call('ZSCORE', P .. ':heartbeats', w)) or now
                out[#out + 1] = w
                out[#out + 1] = now - beat
            end
        end
    end
    return out
end

-- dl_drop KEYS[1]=config ARGV: fragment, round, worker_id
-- A closed round whose participant w died before a shard received its pseudo-gradient again can never
-- commit that shard with w; drop w from the round for every shard not yet committed.
local function dl_drop(keys, args)
    local P = load_run(keys)
    local f, r, w = to_int(args[1], 'fragment'), to_int(args[2], 'round'), args[3]
    reap(P, run_now(P))
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

-- A resent submission (same worker incarnation, same submission number: its first try ran but the
-- reply was lost), or the same submission made by another rank of a process group (each rank's thread
-- places the group's submission: worker/diloco/async.c, async_place_deliver), gets what the first call
-- got, not new places: a place nobody pushes to would stop that shard's order until the worker is
-- evicted. A refused one (STALE) is refused again, recorded once. The worker record keeps its last
-- submission's number, fragment and places or refusal (sub_no, sub_frag, sub_seqs, sub_refused).
-- -> the seqs, or nil when n is a new submission.
local function repeated_submission(rec, n, f, nshards)
    local last = rec.sub_no or 0
    if n > last then return nil end
    if n < last then
        error('BADARG submission ' .. n .. ' is older than this incarnation\'s last one (' .. last .. ')')
    end
    local had = rec.sub_refused and nshards or #rec.sub_seqs
    if rec.sub_frag ~= f or had ~= nshards then
        error('BADARG submission ' .. n .. ' was for fragment ' .. rec.sub_frag .. ' with ' .. had ..
              ' shards; a repeat must be the same submission')
    end
    if rec.sub_refused then error(rec.sub_refused) end
    return rec.sub_seqs
end

-- dl_submit's (shard, base_version) pairs from args[5], each checked: -> {{shard, base, next}, ...}
local function check_plan(shards, args)
    local plan = {}
    for i = 5, #args, 2 do
        local k, base = to_int(args[i], 'shard'), to_int(args[i + 1], 'base_version')
        local nxt = tonumber(redis.call('HGET', shards, k .. ':next'))
        if not nxt then error('BADARG shard ' .. k .. ' does not exist') end
        if base > nxt then error('BADARG base version ' .. base .. ' of shard ' .. k .. ' is in the future') end
        plan[#plan + 1] = {k, base, nxt}
    end
    return plan
end

-- The first entry of plan more than limit versions stale (limit 0: none is), or nil.
local function first_over(plan, limit)
    if limit <= 0 then return nil end
    for _, p in ipairs(plan) do
        if p[3] - p[2] > limit then return p end
    end
    return nil
end

-- A submission refused as STALE, recorded: the first shard over the limit and its staleness, its fragment, and the base
-- of every shard the submission was trained from ("shard:base,...": bases), which a replay of the run needs
-- (the worker trained that window from them, then took the current versions: tests/tools/ref_async.c).
local function reject_stale(P, w, f, plan, over)
    local bases = {}
    for i, p in ipairs(plan) do bases[i] = p[1] .. ':' .. p[2] end
    record_reject(P, {'by', 'dl_submit', 'worker', w, 'code', 'STALE', 'shard', over[1], 'staleness',
                      over[3] - over[2], 'frag', f, 'bases', table.concat(bases, ',')})
end

-- dl_places KEYS[1]=config ARGV: worker_id, incarnation, (shard, seq)*
-- Async: whether each place is still this incarnation's. Redis replication is asynchronous and WAIT is not
-- consensus, so a failover can lose a dl_submit that a replica acknowledged (docs/PROTOCOL.md, "Durable
-- means replicated"): the new master gives the same place to another submission, or to nobody yet, and
-- the worker's push for it is never applied. Asked by the worker once its get returned (or gave up); a
-- place found lost is placed again (worker/diloco/async.c). -> per pair: 1 ours, 0 not ours (another
-- submission's, or not given: the shard's next seq is not past it), -1 unknown (committed more than
-- SUBS_KEPT versions ago).
local function dl_places(keys, args)
    local P = load_run(keys)
    if #args < 4 or #args % 2 ~= 0 then error('BADARG expected worker, incarnation, (shard, seq) pairs') end
    local me = args[1] .. ':' .. to_int(args[2], 'incarnation') .. ':'
    local out = {}
    for i = 3, #args, 2 do
        local k, s = to_int(args[i], 'shard'), to_int(args[i + 1], 'seq')
        local rec = redis.call('HGET', P .. ':subs:' .. k, s)
        local nxt = tonumber(redis.call('HGET', P .. ':shards', k .. ':next'))
        if not nxt then error('BADARG shard ' .. k .. ' does not exist') end
        if rec then
            out[#out + 1] = (string.sub(rec, 1, #me) == me) and 1 or 0
        else
            out[#out + 1] = (s >= nxt) and 0 or -1
        end
    end
    return out
end

-- dl_submit KEYS[1]=config ARGV: worker_id, incarnation, fragment, submission, (shard, base_version)*
-- Gives each shard's submission its place in that shard's order: seq s means the submission turns
-- version s into s+1 (staleness = s - base). All shards are checked before any is assigned, so a
-- submission is all or nothing. submission numbers a worker incarnation's submissions (1, 2, ...): a
-- repeat of the last one answers what it answered (see repeated_submission).
-- -> {seq per shard, in the order given}
local function dl_submit(keys, args)
    local P = load_run(keys)
    local w, inc, f = args[1], args[2], to_int(args[3], 'fragment')
    if redis.call('HGET', keys[1], 'mode') ~= 'async' then
        error('BADARG run ' .. P .. ' is in sync mode: workers arrive at barriers instead of submitting')
    end
    if #args < 6 or (#args - 4) % 2 ~= 0 then
        error('BADARG expected worker, incarnation, fragment, submission, (shard, base_version) pairs')
    end
    local n = to_int(args[4], 'submission')
    if n < 1 then error('BADARG submission must be 1 or more, got ' .. n) end
    local now = run_now(P)
    reap(P, now)
    check_running(P)
    local rec = check_member(P, w, inc, 'dl_submit', {'frag', f})
    check_group_joined(w, rec, 'submits')
    local again = repeated_submission(rec, n, f, (#args - 4) / 2)
    if again then
        redis.call('ZADD', P .. ':heartbeats', now, w)
        return again
    end
    local shards = P .. ':shards'
    local limit = tonumber(tunable(P, 'max_staleness')) or 0
    -- --async-rule rebase: the servers hold only the last rebase_window versions, so none may be staler
    local window = tonumber(redis.call('HGET', keys[1], 'rebase_window')) or 0
    if window > 0 and (limit == 0 or limit > window) then limit = window end
    local plan = check_plan(shards, args)
    local over = first_over(plan, limit)
    if over then
        -- the rejection itself is recorded, and kept as the answer to a repeat (the only writes before this
        -- error); nothing else changes
        reject_stale(P, w, f, plan, over)
        local msg = 'STALE a submission for shard ' .. over[1] .. ' from version ' .. over[2] .. ' would be ' ..
                    (over[3] - over[2]) .. ' versions stale (limit ' .. limit .. '); fetch the current parameters'
        rec.sub_no, rec.sub_frag, rec.sub_seqs, rec.sub_refused = n, f, nil, msg
        put_worker(P, w, rec)
        error(msg)
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
    rec.sub_no, rec.sub_frag, rec.sub_seqs, rec.sub_refused = n, f, seqs, nil
    if group_size(rec) > 1 then rec.synced = true end
    put_worker(P, w, rec)
    redis.call('ZADD', P .. ':heartbeats', now, w)
    return seqs
end

