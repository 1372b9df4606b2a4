-- Requeue leases past their deadline (at-least-once); after max_attempts the request ends
-- internal_error. Handles at most ARGV[3] leases per call; the caller repeats while it is full.
-- KEYS: 1 leases, 2 events, 3 active, 4 stages
-- ARGV: 1 now, 2 max_attempts, 3 limit, 4 policy, 5 result ttl, 6 history K, 7 events maxlen,
--       8 work channel, 9 result channel, 10-13 usage key prefixes (standalone; '' in cluster
--       mode: lib.lua usage_prefixes)
-- Returns {number of expired leases handled, request id, lease id, stage, request id, ...}.
local now = ARGV[1]
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. now, 'LIMIT', 0, ARGV[3])
local ctx = {active = KEYS[3], events = KEYS[2], chan_result = ARGV[9], ttl = ARGV[5],
  k = ARGV[6], maxlen = ARGV[7], usage = usage_prefixes(ARGV[10], ARGV[11], ARGV[12], ARGV[13])}
local out = {#expired}
for _, lkey in ipairs(expired) do
  local l = redis.call('HMGET', lkey, 'k_req', 'k_queue', 'stage', 'worker', 'request_id', 'task',
    'batch_id', 'attempt', 'lease_id')
  redis.call('ZREM', KEYS[1], lkey)
  redis.call('DEL', lkey)
  local reqkey = l[1]
  local r = redis.call('HMGET', reqkey, 'stages', 'attempts', 'seq', 'k_batch', 'state', 'lease')
  if r[5] == 'running' and r[6] == lkey then
    local attempts = tonumber(r[2])
    emit(KEYS[2], ARGV[7], 'lease_expired', now, l[6], l[7],
      '{"stage":' .. cjson.encode(l[3]) .. ',"attempt":' .. l[8] .. '}')
    if attempts >= tonumber(ARGV[2]) then
      redis.call('HSET', reqkey, 'stages', append_json(r[1], stage_record(l[3], l[4], 0, 0,
        'lease_expired')))
      local text = 'lease expired ' .. attempts .. " times at stage '" .. l[3] .. "'"
      local msg = cjson.encode(text)
      local body = '{"status":"internal_error","score":0.0,"detail":{"error":' .. msg .. '}}'
      -- its length as pydantic writes it (cjson escapes '/'): the ASCII around the message, and
      -- the message as pydantic escapes it
      local chars = #body - #msg + json_str_chars(text)
      finish(reqkey, body, 'internal_error', now, ctx, nil, chars)
    else
      redis.call('HSET', reqkey, 'state', 'queued')
      redis.call('HDEL', reqkey, 'lease')
      -- same member and score: back at its place in the batch's order (FCFS within the batch)
      enqueue(l[2], KEYS[4], l[3], reqkey, r[3], queue_score(ARGV[4], r[4]), now)
      redis.call('PUBLISH', ARGV[8], l[3] .. '\n1')
    end
    out[#out + 1] = l[5]
    out[#out + 1] = l[9]
    out[#out + 1] = l[3]
  end
end
usage_flush(ctx)
return out
