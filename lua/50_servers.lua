-- lua/50_servers.lua: functions: shard-servers, leases, commits and snapshots.
-- Part of the diloco Functions library: the Makefile joins lua/*.lua in name order into
-- build/diloco.lua, which every binary embeds (lua/00_header.lua has the library's rules).

-- ---------------------------------------------------------------------------------------------------
-- functions: shard-servers and leases

-- The ttl a server's beat recorded in dl:{R}:servers (its --lease-ttl-ms), or `default` for a server without a
-- record or without a ttl in it (none yet).
local function server_ttl(P, sid, default)
    local rec = redis.call('HGET', P .. ':servers', sid)
    return rec and tonumber(cmsgpack.unpack(rec).ttl) or default
end

-- Forget servers silent for longer than their own lease (their leases have expired too) and count the rest.
-- Each server is judged by its own ttl (--lease-ttl-ms, which its beat records in dl:{R}:servers), not by the
-- caller's: a server with a longer ttl beats less often than a shorter ttl, and the other servers' beats would
-- declare it gone between two of its own (its address deleted, its shards' fair share recomputed) over and
-- over. A record without a ttl (none yet) is judged by the caller's.
local function live_servers(P, now, ttl)
    local older = redis.call('ZRANGEBYSCORE', P .. ':server_beats', '-inf', '(' .. (now - ttl), 'WITHSCORES')
    for i = 1, #older, 2 do
        local sid, beat = older[i], tonumber(older[i + 1])
        if beat < now - server_ttl(P, sid, ttl) then
            redis.call('ZREM', P .. ':server_beats', sid)
            redis.call('HDEL', P .. ':servers', sid)
            event(P, 'server_gone', {'server', sid})
        end
    end
    return redis.call('ZCARD', P .. ':server_beats')
end

-- No server beat for longer than a lease (now - the newest beat > the shortest ttl among the servers alive at
-- that beat: some lease expired while nobody renewed anything): Redis was unreachable to every server (a
-- failover, a restart), or every server stopped at once. Nobody could renew a lease meanwhile, and nobody took
-- one, so the time does not count: the leases valid at the last beat, and the servers then alive (each by its
-- own ttl), get their owner's ttl from now. Otherwise the first server back would find every other lease
-- expired and take all the shards, and hand most of them back a beat later (each move costs a load and, for
-- the workers, a resend). A server that died meanwhile loses its leases one ttl later.
-- Each server's own ttl, not the caller's (as in live_servers): extended by a short ttl, a long-ttl server's
-- leases expired before its next beat and it took them anew under new epochs; a caller with a long ttl saw
-- no outage where the short-ttl servers' leases had all expired; and a new caller with a short ttl saw an
-- outage in the usual gap between two beats of long-ttl servers. A server dead before the last beat (its
-- own ttl had run out then) does not count: its short ttl would make every gap look like an outage.
local function forgive_outage(P, S, now, ttl)
    local beats = P .. ':server_beats'
    -- The usual case at a glance, without reading every server's record: a beat in the last 300 ms (the
    -- shortest --lease-ttl-ms bin/shard-server takes) is no outage. Only ZRANGEBYSCORE: the shard-server's
    -- ACL user (deploy/redis/users.acl) may not run ZREVRANGE.
    local glance = math.min(ttl, 300)
    if #redis.call('ZRANGEBYSCORE', beats, now - glance, '+inf', 'LIMIT', 0, 1) > 0 then return end
    local all = redis.call('ZRANGEBYSCORE', beats, '-inf', '+inf', 'WITHSCORES')
    if #all < 2 then return end
    local last, own, alive, shortest = tonumber(all[#all]), {}, {}, nil
    for i = 1, #all, 2 do
        local sid = all[i]
        own[sid] = server_ttl(P, sid, ttl)
        if tonumber(all[i + 1]) >= last - own[sid] then
            alive[#alive + 1] = sid
            shortest = math.min(shortest or own[sid], own[sid])
        end
    end
    if now - last <= shortest then return end
    for _, sid in ipairs(alive) do redis.call('ZADD', beats, now, sid) end
    local shards = P .. ':shards'
    for k = 0, S - 1 do
        local v = redis.call('HMGET', shards, k .. ':owner', k .. ':expiry')
        if v[1] and v[1] ~= '' and (tonumber(v[2]) or 0) >= last then
            redis.call('HSET', shards, k .. ':expiry', now + (own[v[1]] or ttl))
        end
    end
    event(P, 'outage', {'seconds', string.format('%.3f', (now - last) / 1000)})
end

-- Tell the other shard-servers that shards were given back (shard-server/subscribe.c): they beat at once and
-- take them, instead of at their next beat (up to ttl/3 later, the shards without an owner meanwhile). On
-- the channel of the barrier closes, as "lease:<server id>"; only an accelerator (pcall: a message refused
-- or lost changes nothing, the periodic beat takes them).
local function announce_release(P, sid)
    redis.pcall('PUBLISH', P .. ':closes', 'lease:' .. sid)
end

-- Two live processes must not share a server id: each would take the other's leases at every beat (the one
-- that has not loaded a shard takes it anew with a new epoch, the other then renews it under that epoch) and
-- both would serve and commit the same shards, each with part of a round's pseudo-gradients. Every process
-- names itself with a random token, kept in its record. A process's first beat (first = '1': none of its
-- beats was answered yet) takes the id over whoever held it: a restart after a crash, or a second process by
-- mistake. A later beat whose token is not the record's, while that record is alive (its last beat within
-- its ttl), is refused REPLACED, before any write: the other process took the id since. The caller then
-- serves nothing and beats on; it stops when the other goes on beating (shard-server/lease.c). A record
-- that is not alive does not refuse: its process is dead, or it is our own record lost in a Redis failover
-- or restart and an older one came back. A caller without a token (an older build) is not checked.
-- server_taken_by: the record of the live other process that holds the id now, or nil.
local function server_taken_by(P, sid, token)
    if token == nil or token == '' then return nil end
    local rec = redis.call('HGET', P .. ':servers', sid)
    if not rec then return nil end
    local r = cmsgpack.unpack(rec)
    if r.token == nil or r.token == token then return nil end
    if (tonumber(r.last) or 0) + (tonumber(r.ttl) or 0) < run_now(P) then return nil end
    return r
end

local function check_server_process(P, sid, token, first)
    local other = first ~= '1' and server_taken_by(P, sid, token)
    if not other then return end
    error('REPLACED server id ' .. sid .. ' was taken over by another process (pid ' .. tostring(other.pid) ..
          ', data plane ' .. tostring(other.addr) .. ') since this one last renewed its leases')
end

-- dl_server_beat KEYS[1]=config ARGV: server_id, address, ttl_ms, pid[, loaded[, busy[, created_ms[, token,
-- first]]]]
-- Renews the caller's valid leases (after forgive_outage), takes free or expired shards up to its fair share
-- ceil(shards/servers), and gives back shards above it so a new server gets work.
-- loaded (comma-separated shard numbers, possibly empty) are the shards the caller has in memory: a
-- valid lease of its id on a shard not among them is taken anew with a new epoch (the process restarted
-- with the same id, or dropped the shard): what the old epoch promised (parameters sent but not yet
-- committed, docs/PROTOCOL.md) died with that memory, and workers learn it from the epoch.
-- busy (the same form) are shards whose commit is under way at the caller: not given back at this beat
-- (its workers may hold the version it serves before dl_commit; given back now, that commit is fenced
-- and the new owner needs every pseudo-gradient of the round again). The caller names a shard busy at a
-- few beats in a row at most (shard-server/lease.c), so a give-back waits a few beats at most.
-- created_ms ('' or absent: not checked) is the config's created_ms when the caller loaded the run: a run
-- made again under the same name since (coordinator init --force) is refused RECREATED, before the caller
-- takes a lease it would load with the old run's layout and serve under the old secret.
-- token, first: the calling process and whether this is its first answered beat (check_server_process).
-- -> flat {shard, epoch, shard, epoch, ...} of the leases the caller now holds.
local function dl_server_beat(keys, args)
    local P = load_run(keys)
    local sid, addr = args[1], args[2]
    local ttl = to_int(args[3], 'ttl_ms')
    if sid == nil or sid == '' or ttl <= 0 then error('BADARG server id and a positive ttl are required') end
    local loaded, busy = nil, {}
    if args[5] ~= nil then
        loaded = {}
        for k in string.gmatch(args[5], '%d+') do loaded[tonumber(k)] = true end
    end
    for k in string.gmatch(args[6] or '', '%d+') do busy[tonumber(k)] = true end
    check_made_at(P, keys[1], args[7])
    check_server_process(P, sid, args[8], args[9])
    local now, step = run_clock(P)
    local S = tonumber(redis.call('HGET', keys[1], 'shards'))
    local shards = P .. ':shards'
    forgive_outage(P, S, now, ttl)
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
    -- give back the highest-numbered shards above the fair share, but only when someone lacks work, and
    -- none whose commit is under way (busy)
    local i, released = #held, 0
    while #held > fair and #free == 0 and i >= 1 do
        local k = held[i]
        if not busy[k] then
            table.remove(held, i)
            redis.call('HSET', shards, k .. ':owner', '', k .. ':expiry', 0)
            redis.call('HINCRBY', P .. ':state', 'lease_changes', 1)
            event(P, 'release', {'shard', k, 'server', sid})
            released = released + 1
        end
        i = i - 1
    end
    if released > 0 then announce_release(P, sid) end
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
                                                           held = #held, ttl = ttl, token = args[8]}))
    clock_record(P, now, step)
    return out
end

-- dl_server_leave KEYS[1]=config ARGV: server_id[, token]  (clean shutdown: give every lease back)
-- A process whose id another process took over since (token not the record's, check_server_process) gives
-- back nothing: the leases under its id are the other's. -> 'OK', or 'REPLACED' when nothing was done.
local function dl_server_leave(keys, args)
    local P = load_run(keys)
    local sid = args[1]
    if server_taken_by(P, sid, args[2]) then return 'REPLACED' end
    local S = tonumber(redis.call('HGET', keys[1], 'shards'))
    local released = 0
    for k = 0, S - 1 do
        if redis.call('HGET', P .. ':shards', k .. ':owner') == sid then
            redis.call('HSET', P .. ':shards', k .. ':owner', '', k .. ':expiry', 0)
            event(P, 'release', {'shard', k, 'server', sid})
            released = released + 1
        end
    end
    redis.call('ZREM', P .. ':server_beats', sid)
    redis.call('HDEL', P .. ':servers', sid)
    if released > 0 then announce_release(P, sid) end
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
-- Makes version from+1 of the shard current: fenced by the lease epoch and by the version. The digest is
-- also appended to k:digests ("v:digest,..."; from the snapshot's version on), the record against which
-- `coordinator repair` verifies each version it could roll back to.
local function dl_commit(keys, args)
    local P = load_run(keys)
    local sid, epoch, k = args[1], args[2], to_int(args[3], 'shard')
    local from = to_int(args[4], 'from_version')
    local digest, logref, nparts = args[5], args[6], args[7]
    local now = run_now(P)
    local cur = check_lease(P, sid, k, epoch, now)
    if cur ~= from then
        error('VERSION shard ' .. k .. ' is at version ' .. cur .. ', not ' .. from)
    end
    local shards = P .. ':shards'
    local log = redis.call('HGET', shards, k .. ':log')
    if log and log ~= '' then log = log .. ',' .. logref else log = logref end
    local digests = redis.call('HGET', shards, k .. ':digests')
    if digests and digests ~= '' then digests = digests .. ',' else digests = '' end
    redis.call('HSET', shards, k .. ':version', from + 1, k .. ':digest', digest, k .. ':log', log,
               k .. ':digests', digests .. (from + 1) .. ':' .. digest, k .. ':committed_ms', now)
    redis.call('HINCRBY', P .. ':state', 'commits', 1)
    -- an async submission's record outlives its commit by SUBS_KEPT versions: its worker asks after its get
    -- whether the place it was given is the one the shard applied (dl_places)
    redis.call('HDEL', P .. ':subs:' .. k, from - SUBS_KEPT)
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
    local cur = check_lease(P, sid, k, epoch, run_now(P))
    if v > cur then error('VERSION shard ' .. k .. ' is at version ' .. cur .. ', not ' .. v) end
    local shards = P .. ':shards'
    local was = tonumber(redis.call('HGET', shards, k .. ':replicated')) or 0
    if v <= was then return was end
    redis.call('HSET', shards, k .. ':replicated', v)
    return v
end

-- The refs of `obsolete` (a csv: a snapshot ref, then log refs) that the shard's durable state does not
-- name now, as {snap ref, log refs...}.
local function unreferenced(obsolete, snap, log_refs)
    local named = {[snap] = true}
    for _, e in ipairs(log_refs) do named[e] = true end
    local out = {}
    for i, e in ipairs(split_csv(obsolete)) do
        if named[e] then e = '' end -- (a kept position: the first ref is a snapshot's)
        if e ~= '' or i == 1 then out[#out + 1] = e end
    end
    return out
end

-- dl_snapshot KEYS[1]=config ARGV: server_id, epoch, shard, version, snap_ref
-- Records a snapshot of the shard at `version` and trims the log entries it covers (and the digests of
-- k:digests before `version`).
-- -> {old snapshot ref, trimmed log refs..., {the previous dl_snapshot's obsolete refs}} so the caller
-- can delete those blobs. The previous call's refs (k:obsolete) come again, minus any named again since
-- (a repair): when that call ran but its reply was lost (a Redis restart, a broken connection), its
-- caller deleted nothing, and this is the next chance. Deleting a blob twice is harmless.
local function dl_snapshot(keys, args)
    local P = load_run(keys)
    local sid, epoch, k = args[1], args[2], to_int(args[3], 'shard')
    local v, ref = to_int(args[4], 'version'), args[5]
    local cur = check_lease(P, sid, k, epoch, run_now(P))
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
    local digests = {}
    for _, e in ipairs(split_csv(redis.call('HGET', shards, k .. ':digests'))) do
        if tonumber(string.match(e, '^(%d+):')) >= v then digests[#digests + 1] = e end
    end
    local before = unreferenced(redis.call('HGET', shards, k .. ':obsolete'), ref, keep)
    redis.call('HSET', shards, k .. ':snap', ref, k .. ':log', table.concat(keep, ','),
               k .. ':digests', table.concat(digests, ','), k .. ':obsolete', table.concat(trimmed, ','))
    trimmed[#trimmed + 1] = before
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
    local cur = check_lease(P, sid, k, epoch, run_now(P))
    if cur ~= v then
        error('VERSION shard ' .. k .. ' is at version ' .. cur .. ', not ' .. v .. ': load it again')
    end
    local shards = P .. ':shards'
    if redis.call('HGET', shards, k .. ':corrupt') == key then return 0 end
    redis.call('HSET', shards, k .. ':corrupt', key, k .. ':corrupt_reason', reason, k .. ':corrupt_ms', run_now(P))
    redis.call('HINCRBY', P .. ':state', 'corruptions', 1)
    event(P, 'corrupt', {'shard', k, 'version', v, 'key', key, 'reason', reason, 'server', sid})
    return 1
end

