-- Register a batch (idempotent), enforcing task ownership by tenant.
-- KEYS: 1 owner, 2 batch, 3 span, 4 events, 5 active,
--       6 members, 7 results, 8 queued, 9 profile, 10 history, 11 spans (all tasks)
-- ARGV: 1 tenant, 2 task, 3 batch_id, 4 size, 5 reward_type ('' = none),
--       6 rollout_started_at ('' = none), 7 now, 8 span prior of a task with no history
--       (core/history.py prior_span, computed by the caller from KEYS[11]; '' = not computed),
--       9 events maxlen
-- Returns {created (0|1), field, value, ...} of the batch hash, or {2} without writing anything
-- when the batch is new, its task has no span yet and no prior was given: the caller computes
-- the prior and calls again (reading the recent spans of all tasks on every registration cost
-- more than the registration itself).
local tenant, task, batch_id, size = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local rtype, rollout, now = ARGV[5], ARGV[6], ARGV[7]
local owner = redis.call('GET', KEYS[1])
if owner and owner ~= tenant then
  return fail('unknown_task', {task = task, batch_id = batch_id})
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  local cur = redis.call('HMGET', KEYS[2], 'size', 'reward_type')
  -- a registration without a type, or of a batch without one, never conflicts on the type
  if cur[1] ~= size or (rtype ~= '' and cur[2] and cur[2] ~= rtype) then
    return fail('batch_conflict', {task = task, batch_id = batch_id, size = tonumber(cur[1]),
      reward_type = cur[2] or cjson.null})
  end
  return {0, redis.call('HGETALL', KEYS[2])}
end
local known = redis.call('GET', KEYS[3])
if not known and ARGV[8] == '' then
  return {2}
end
redis.call('SET', KEYS[1], tenant)
local span = tonumber(known or ARGV[8])
-- the anchor is the rollout-start hint, else the registration time (BatchInfo.anchor)
local anchor = tonumber(now)
if rollout ~= '' then anchor = tonumber(rollout) end
-- Eq. 1-2 estimate: the task's latest finished batch shifted to this batch's anchor
-- (core/history.py estimate_completion).
local fields = {'tenant', tenant, 'task', task, 'batch_id', batch_id, 'size', size,
  'registered_at', now, 'estimated_completion', fmt(anchor + span), 'submitted', 0, 'done', 0,
  'k_members', KEYS[6], 'k_results', KEYS[7], 'k_queued', KEYS[8], 'k_profile', KEYS[9],
  'k_history', KEYS[10], 'k_span', KEYS[3], 'k_spans', KEYS[11]}
if rtype ~= '' then
  table.insert(fields, 'reward_type'); table.insert(fields, rtype)
end
if rollout ~= '' then
  table.insert(fields, 'rollout_started_at'); table.insert(fields, rollout)
end
redis.call('HSET', KEYS[2], unpack(fields))
redis.call('ZADD', KEYS[5], now, KEYS[2])
emit(KEYS[4], ARGV[9], 'batch_registered', now, task, batch_id,
  '{"size":' .. size .. '}')
return {1, redis.call('HGETALL', KEYS[2])}
