-- Extend a live lease.
-- KEYS: 1 lease key, 2 leases
-- ARGV: 1 now, 2 ttl_s, 3 holder, 4 lease_id
-- Returns the new deadline.
local l, err = live_lease(KEYS[1], ARGV[1], ARGV[3], ARGV[4])
if not l then
  return err
end
local deadline = fmt(tonumber(ARGV[1]) + tonumber(ARGV[2]))
redis.call('HSET', KEYS[1], 'deadline', deadline)
redis.call('ZADD', KEYS[2], deadline, KEYS[1])
return deadline
