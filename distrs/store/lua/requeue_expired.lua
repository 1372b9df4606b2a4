-- Requeue leases past their deadline (at-least-once); after A.max_attempts the request ends
-- internal_error. Handles at most A.limit leases per call; the caller repeats while it is full.
-- Keys and arguments: scripts.py REQUEUE_EXPIRED.
-- Returns {number of expired leases handled, request id, task, stage, request id, ...}.
local now = A.now
local expired = redis.call('ZRANGEBYSCORE', K.leases, '-inf', '(' .. now, 'LIMIT', 0, A.limit)
local ctx = transition(K.leases, K.events, K.active, K.stages, A.policy, A.ttl, A.history_k,
  A.maxlen, A.chan_work, A.chan_result, A.u_queued, A.u_bytes, A.u_expiry, A.u_totals)
local out = {#expired}
for _, lkey in ipairs(expired) do
  local l = redis.call('HMGET', lkey, 'k_req', 'k_queue', 'stage', 'worker', 'request_id', 'task',
    'batch_id', 'attempt')
  redis.call('ZREM', K.leases, lkey)
  redis.call('DEL', lkey)
  local reqkey = l[1]
  local r = redis.call('HMGET', reqkey, 'stages', 'attempts', 'seq', 'k_batch', 'state', 'lease')
  if r[5] == 'running' and r[6] == lkey then
    local attempts = tonumber(r[2])
    emit(K.events, A.maxlen, 'lease_expired', now, l[6], l[7],
      '{"stage":' .. cjson.encode(l[3]) .. ',"attempt":' .. l[8] .. '}')
    if attempts >= tonumber(A.max_attempts) then
      local text = 'lease expired ' .. attempts .. " times at stage '" .. l[3] .. "'"
      local msg = cjson.encode(text)
      local body = '{"status":"internal_error","score":0.0,"detail":{"error":' .. msg .. '}}'
      -- its length as pydantic writes it (cjson escapes '/'): the ASCII around the message, and
      -- the message as pydantic escapes it
      local chars = #body - #msg + json_str_chars(text)
      finish(reqkey, body, 'internal_error', now, ctx, stage_record(l[3], l[4], 0, 0, 'lease_expired'),
        chars)
    else
      redis.call('HSET', reqkey, 'state', 'queued', 'lease', '')
      -- same member and score: back at its place in the batch's order (FCFS within the batch)
      enqueue(l[2], K.stages, l[3], reqkey, r[3], queue_score(A.policy, r[4]), now)
      redis.call('PUBLISH', A.chan_work, l[3] .. '\n1')
    end
    out[#out + 1] = l[5]
    out[#out + 1] = l[6]
    out[#out + 1] = l[3]
  end
end
usage_flush(ctx)
return out
