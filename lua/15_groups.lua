-- lua/15_groups.lua: process groups: one member of the run made of several processes (ranks), e.g. one
-- per GPU of a node (docs/PROTOCOL.md, "Process groups").
-- Part of the diloco Functions library: the Makefile joins lua/*.lua in name order into
-- build/diloco.lua, which every binary embeds (lua/00_header.lua has the library's rules).
--
-- A group is one worker record with `group` = its size R. Rank 0 registers it (dl_register with R),
-- the other ranks join it under the same incarnation (dl_group_join) before it first arrives anywhere.
-- Per rank the record keeps `gjoin` (1 once joined), `gbeat` (last beat, ms) and `gtok` (tokens); the
-- member's heartbeat score is its oldest rank's beat, so the reaper evicts the whole group when any
-- one rank goes silent. A rank's arrival at a barrier is the field `g:<worker>:<rank>` = incarnation;
-- the group's arrival `a:<worker>` (the only kind barrier_try_close counts) is written when every rank's
-- is there, so the group is a participant only once all of its ranks pushed.

local GROUP_MAX = 64

local function group_size(rec) return (rec and rec.group) or 1 end

-- A new group record's per-rank fields: rank 0 (the registering one) joined and beating now, the others
-- due to join and beat within the heartbeat timeout.
local function group_fields(rec, size, now)
    if size <= 1 then return end
    rec.group, rec.gjoin, rec.gbeat, rec.gtok = size, {}, {}, {}
    for q = 1, size do
        rec.gjoin[q] = (q == 1) and 1 or 0
        rec.gbeat[q] = now
        rec.gtok[q] = 0
    end
end

-- The member's liveness (its dl:{R}:heartbeats score): a group is as alive as its most silent rank.
local function beat_score(rec, now)
    if group_size(rec) <= 1 then return now end
    local oldest = now
    for q = 1, rec.group do
        if rec.gbeat[q] < oldest then oldest = rec.gbeat[q] end
    end
    return oldest
end

-- Rank `rank` of w (0 for a worker of one process) was heard from now: its beat, then the score.
-- Returns true when rec changed (a group's: the caller writes it back).
local function beat_rank(P, w, rec, rank, now)
    local changed = false
    if group_size(rec) > 1 then
        rec.gbeat[rank + 1] = now
        changed = true
    end
    redis.call('ZADD', P .. ':heartbeats', beat_score(rec, now), w)
    return changed
end

-- The rank argument of a group call: 0 .. size-1 and joined (rank 0 always is).
local function check_rank(w, rec, rank)
    local size = group_size(rec)
    if rank < 0 or rank >= size then
        error('BADARG rank ' .. rank .. ' is not in worker ' .. w .. "'s group of " .. size .. ' process(es)')
    end
    if size > 1 and rec.gjoin[rank + 1] ~= 1 then
        error('GROUP rank ' .. rank .. ' of worker ' .. w .. ' has not joined its group (dl_group_join)')
    end
end

-- Wake lists of w: dl:{R}:wake:<w> (a worker, a group's rank 0) and dl:{R}:wake:<w>:<rank> for the other
-- ranks of a group (a worker id has no colon), so every rank waiting at a barrier is woken.
local function wake_member(P, w, rec, token)
    for q = 0, group_size(rec) - 1 do
        local wk = P .. ':wake:' .. w
        if q > 0 then wk = wk .. ':' .. q end
        redis.call('RPUSH', wk, token)
        redis.call('EXPIRE', wk, 600)
    end
end

-- Record rank `rank`'s arrival at barrier B; true when the whole group (every rank, this incarnation)
-- has arrived, so the group's own arrival a:<w> may be written.
-- A group takes part in a round (arrives: dl_arrive; async, its rank 0 submits: dl_submit) only once every
-- rank joined. GROUP otherwise.
local function check_group_joined(w, rec, verb)
    if group_size(rec) <= 1 then return end
    for q = 1, rec.group do
        if rec.gjoin[q] ~= 1 then
            error('GROUP rank ' .. (q - 1) .. ' of worker ' .. w .. ' has not joined: a group ' .. verb ..
                  ' only once every rank joined')
        end
    end
end

local function group_arrived(B, w, rec, inc, rank)
    redis.call('HSET', B, 'g:' .. w .. ':' .. rank, inc)
    for q = 0, rec.group - 1 do
        if redis.call('HGET', B, 'g:' .. w .. ':' .. q) ~= tostring(inc) then return false end
    end
    return true
end

-- A group that left on purpose (dl_deregister by one of its ranks): hash dl:{R}:left:<w>, field inc = its
-- incarnation, for LEFT_TTL_S (a hash: the worker ACL user has HSET/HGET/EXPIRE, not SET/GET), so its other ranks' heartbeats, which may come before they learn it, are answered GONE
-- instead of being counted as rejections of an unknown worker. An eviction is not remembered: the beats
-- of an evicted group are rejections as any evicted worker's.
local LEFT_TTL_S = 600

local function group_left(P, w, inc)
    local k = P .. ':left:' .. w
    redis.call('HSET', k, 'inc', tostring(inc))
    redis.call('EXPIRE', k, LEFT_TTL_S)
end

-- Whether (w, inc) is a group that left and is not a live member again under that incarnation.
local function left_group(P, w, inc)
    if redis.call('HGET', P .. ':left:' .. w, 'inc') ~= tostring(inc) then return false end
    local rec = get_worker(P, w)
    return not rec or tostring(rec.inc) ~= tostring(inc)
end
