-- Give a live lease back unworked (a draining worker got work as it was told to stop): the
-- request returns to its place in the stage queue and the attempt is not counted.
-- KEYS: 1 lease key, 2 leases, 3 stages
-- ARGV: 1 now, 2 holder, 3 lease_id, 4 policy, 5 work channel
-- Returns the stage.
local l, err = live_lease(KEYS[1], ARGV[1], ARGV[2], ARGV[3], 'k_req', 'k_queue', 'stage')
if not l then
  return err
end
local reqkey = l[4]
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], KEYS[1])
local r = redis.call('HMGET', reqkey, 'seq', 'k_batch', 'stage_enqueued_at')
redis.call('HSET', reqkey, 'state', 'queued')
redis.call('HDEL', reqkey, 'lease')
redis.call('HINCRBY', reqkey, 'attempts', -1)
-- same member and score: back at its place in the batch's order (FCFS within the batch)
-- and its queued time still counts from when it joined the stage
enqueue(l[5], KEYS[3], l[6], reqkey, r[1], queue_score(ARGV[4], r[2]), r[3] or ARGV[1])
redis.call('PUBLISH', ARGV[5], l[6] .. '\n1')
return l[6]
