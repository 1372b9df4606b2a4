-- Finish the leases of a bundle in one transition, each for itself: one refused lease (expired,
-- unknown, another holder's) never keeps the others from landing.
-- KEYS: 1 leases, 2 events, 3 active, 4 stages; then per item: lease key, next stage queue (or
--       the lease key when final)
-- ARGV: 1 now, 2 holder, 3 policy, 4 result ttl, 5 history K, 6 events maxlen, 7 work channel,
--       8 result channel, 9 number of items, 10-13 usage key prefixes (standalone; '' in cluster
--       mode: lib.lua usage_prefixes); then per item: lease_id, run_s, outcome,
--       next stage ('' = final), artifacts JSON ('' = keep), result JSON, status
-- Returns per item {'ok', batch_completed (0|1), request hash as field, value, ...} or
-- {'err', code, details JSON}.
local ctx = {active = KEYS[3], events = KEYS[2], stages = KEYS[4], chan_work = ARGV[7],
  chan_result = ARGV[8], ttl = ARGV[4], k = ARGV[5], maxlen = ARGV[6], policy = ARGV[3],
  usage = usage_prefixes(ARGV[10], ARGV[11], ARGV[12], ARGV[13])}
local out = {}
local n = tonumber(ARGV[9])
for i = 1, n do
  local ki, ai = 5 + (i - 1) * 2, 14 + (i - 1) * 7
  local completed, reqkey, details = complete_one(KEYS[ki], KEYS[1], KEYS[ki + 1], ARGV[2],
    ARGV[ai], ARGV[1], ARGV[ai + 1], ARGV[ai + 2], ARGV[ai + 3], ARGV[ai + 4], ARGV[ai + 5],
    ARGV[ai + 6], ctx)
  if completed then
    out[i] = {'ok', completed, redis.call('HGETALL', reqkey)}
  else
    out[i] = {'err', reqkey, cjson.encode(details)}
  end
end
usage_flush(ctx)
return out
