-- Extend a live lease.
-- KEYS: 1 lease key, 2 leases
-- ARGV: 1 now, 2 ttl_s, 3 holder, 4 lease_id
-- Returns the new deadline.
local deadline, code, details = extend(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4])
if not deadline then
  return fail(code, details)
end
return deadline
