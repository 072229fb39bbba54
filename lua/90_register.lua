-- lua/90_register.lua: registration of every function with Redis.
-- Part of the diloco Functions library: the Makefile joins lua/*.lua in name order into
-- build/diloco.lua, which every binary embeds (lua/00_header.lua has the library's rules).

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

-- flags: 'no-writes' (read-only: runs on a replica, and while Redis refuses writes), or 'allow-oom' for the
-- liveness functions: a Redis at its maxmemory (noeviction) refuses every other write, and these keep
-- workers members and shard-servers' leases held meanwhile, so that the run is where it was once memory is
-- raised (before, a worker silent for the heartbeat timeout was evicted and lost its round, and every
-- shard-server dropped its shards and loaded them again; it_redis_refuses_writes). What they write is a few
-- fields over the ones they replace, and an event now and then.
local function reg(name, fn, flag)
    local spec = {function_name = name, callback = wrap(fn)}
    if flag == true then spec.flags = {'no-writes'} elseif flag then spec.flags = {flag} end
    redis.register_function(spec)
end

reg('dl_version', dl_version, true)
reg('dl_build', dl_build, true)
reg('dl_init', dl_init)
reg('dl_register', dl_register)
reg('dl_deregister', dl_deregister)
reg('dl_group_join', dl_group_join)
reg('dl_heartbeat', dl_heartbeat, 'allow-oom')
reg('dl_member', dl_member, true)
reg('dl_reap', dl_reap, 'allow-oom')
reg('dl_arrive', dl_arrive)
reg('dl_barrier', dl_barrier)
reg('dl_waiting', dl_waiting, true)
reg('dl_drop', dl_drop)
reg('dl_submit', dl_submit)
reg('dl_places', dl_places, true)
reg('dl_server_beat', dl_server_beat, 'allow-oom')
reg('dl_server_leave', dl_server_leave)
reg('dl_commit', dl_commit)
reg('dl_replicated', dl_replicated)
reg('dl_snapshot', dl_snapshot)
reg('dl_mark_corrupt', dl_mark_corrupt)
reg('dl_reject', dl_reject)
reg('dl_duplicate', dl_duplicate)
reg('dl_kick', dl_kick)
reg('dl_set', dl_set)
reg('dl_shutdown', dl_shutdown)
reg('dl_repair', dl_repair)
reg('dl_unmark_corrupt', dl_unmark_corrupt)
reg('dl_status', dl_status, true)
