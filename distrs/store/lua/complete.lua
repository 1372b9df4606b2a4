-- Finish a live lease: move the request on to the next stage with artifacts, or record its
-- result. A finished or requeued lease no longer exists, so it is unknown.
-- KEYS: 1 lease key, 2 leases, 3 next stage queue (or the lease key when final), 4 events,
--       5 active, 6 stages
-- ARGV: 1 now, 2 holder, 3 lease_id, 4 run_s, 5 outcome, 6 next stage ('' = final),
--       7 artifacts JSON ('' = keep), 8 result JSON without request_id and stages, 9 status,
--       10 policy, 11 result ttl, 12 history K, 13 events maxlen, 14 work channel, 15 result channel
-- Returns {batch_completed (0|1), request hash as field, value, ...}.
local l, err = live_lease(KEYS[1], ARGV[1], ARGV[2], ARGV[3], 'k_req', 'stage', 'queued_s', 'worker')
if not l then
  return err
end
local now = ARGV[1]
local reqkey = l[4]
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], KEYS[1])
local stages = redis.call('HGET', reqkey, 'stages')
redis.call('HSET', reqkey, 'stages', append_json(stages, stage_record(l[5], l[7],
  tonumber(l[6]), tonumber(ARGV[4]), ARGV[5])))
local completed = 0
if ARGV[6] ~= '' then
  local r = redis.call('HMGET', reqkey, 'seq', 'k_batch')
  if ARGV[7] ~= '' then
    redis.call('HSET', reqkey, 'artifacts', ARGV[7])
  end
  -- max_attempts counts per stage
  redis.call('HSET', reqkey, 'state', 'queued', 'stage', ARGV[6], 'stage_enqueued_at', now,
    'attempts', 0)
  redis.call('HDEL', reqkey, 'lease')
  enqueue(KEYS[3], KEYS[6], ARGV[6], reqkey, r[1], queue_score(ARGV[10], r[2]), now)
  redis.call('PUBLISH', ARGV[14], ARGV[6] .. '\n1')
else
  local ctx = {active = KEYS[5], events = KEYS[4], chan_result = ARGV[15], ttl = ARGV[11],
    k = ARGV[12], maxlen = ARGV[13]}
  completed = finish(reqkey, ARGV[8], ARGV[9], now, ctx)
end
return {completed, redis.call('HGETALL', reqkey)}
