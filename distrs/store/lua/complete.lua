-- Finish a live lease: move the request on to the next stage with artifacts, or record its
-- result. A finished or requeued lease no longer exists, so it is unknown.
-- KEYS: 1 lease key, 2 leases, 3 next stage queue (or the lease key when final), 4 events,
--       5 active, 6 stages
-- ARGV: 1 now, 2 holder, 3 lease_id, 4 run_s, 5 outcome, 6 next stage ('' = final),
--       7 artifacts JSON ('' = keep), 8 result JSON without request_id and stages, 9 status,
--       10 policy, 11 result ttl, 12 history K, 13 events maxlen, 14 work channel, 15 result channel,
--       16-19 usage key prefixes (standalone; '' in cluster mode: lib.lua usage_prefixes)
-- Returns {batch_completed (0|1), request hash as field, value, ...}.
local ctx = {active = KEYS[5], events = KEYS[4], stages = KEYS[6], chan_work = ARGV[14],
  chan_result = ARGV[15], ttl = ARGV[11], k = ARGV[12], maxlen = ARGV[13], policy = ARGV[10],
  usage = usage_prefixes(ARGV[16], ARGV[17], ARGV[18], ARGV[19])}
local completed, reqkey, details = complete_one(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3],
  ARGV[1], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ctx)
usage_flush(ctx)
if not completed then
  return fail(reqkey, details)
end
return {completed, redis.call('HGETALL', reqkey)}
