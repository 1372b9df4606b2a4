-- Take the head of a stage queue and lease it to a worker until now + ttl.
-- KEYS: 1 stage queue, 2 leases, 3 lease key
-- ARGV: 1 now, 2 ttl_s, 3 worker_id, 4 lease_id, 5 stage, 6 holder (credential identity)
-- Returns nil when the queue is empty, else {request_id, task, batch_id, reward_type, payload,
-- artifacts, attempt, deadline}.
local now = tonumber(ARGV[1])
while true do
  local head = redis.call('ZPOPMIN', KEYS[1], 1)
  if #head == 0 then
    return false
  end
  local member = head[1]
  local reqkey = string.sub(member, 21)
  local r = redis.call('HMGET', reqkey, 'request_id', 'task', 'batch_id', 'reward_type', 'payload',
    'artifacts', 'stage_enqueued_at', 'k_queued', 'state')
  -- a queue entry whose request vanished (expired or deleted by an operator) is dropped
  if r[1] and r[9] == 'queued' then
    redis.call('ZREM', r[8], ARGV[5] .. '\n' .. reqkey)
    local attempt = redis.call('HINCRBY', reqkey, 'attempts', 1)
    redis.call('HSET', reqkey, 'state', 'running', 'lease', KEYS[3])
    local deadline = fmt(now + tonumber(ARGV[2]))
    redis.call('HSET', KEYS[3], 'lease_id', ARGV[4], 'k_req', reqkey, 'k_queue', KEYS[1],
      'member', member, 'stage', ARGV[5], 'worker', ARGV[3], 'holder', ARGV[6], 'deadline', deadline,
      'started_at', ARGV[1], 'attempt', attempt, 'queued_s', fmt(math.max(0, now - tonumber(r[7]))),
      'state', 'live', 'request_id', r[1], 'task', r[2], 'batch_id', r[3])
    redis.call('ZADD', KEYS[2], deadline, KEYS[3])
    return {r[1], r[2], r[3], r[4], r[5], r[6], attempt, deadline}
  end
end
