-- Extend a live lease.
-- KEYS: 1 lease key, 2 leases
-- ARGV: 1 now, 2 ttl_s, 3 worker_id, 4 lease_id
-- Returns the new deadline.
local l = redis.call('HMGET', KEYS[1], 'worker', 'state', 'deadline')
if not l[1] or l[2] ~= 'live' then
  return fail('unknown_lease', {lease_id = ARGV[4]})
end
if l[1] ~= ARGV[3] then
  return fail('lease_not_yours', {lease_id = ARGV[4]})
end
if tonumber(l[3]) < tonumber(ARGV[1]) then
  return fail('lease_expired', {lease_id = ARGV[4], deadline = tonumber(l[3])})
end
local deadline = fmt(tonumber(ARGV[1]) + tonumber(ARGV[2]))
redis.call('HSET', KEYS[1], 'deadline', deadline)
redis.call('ZADD', KEYS[2], deadline, KEYS[1])
return deadline
