-- Read a live lease with its request's type, payload and artifacts in one round trip.
-- Keys: scripts.py GET_LEASE.
-- Returns nil when the lease does not exist, else {request_id, task, batch_id, stage, worker,
-- deadline, attempt, started_at, reward_type, payload, artifacts, holder}.
local l = redis.call('HMGET', K.lease, 'request_id', 'task', 'batch_id', 'stage', 'worker',
  'deadline', 'attempt', 'started_at', 'k_req', 'state', 'holder')
if not l[1] or l[10] ~= 'live' then
  return false
end
local r = redis.call('HMGET', l[9], 'reward_type', 'payload', 'artifacts')
if not r[1] then
  return false
end
return {l[1], l[2], l[3], l[4], l[5], l[6], l[7], l[8], r[1], r[2], r[3], l[11]}
