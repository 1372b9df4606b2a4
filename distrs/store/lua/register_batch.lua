-- Register a batch (idempotent), enforcing task ownership by tenant.
-- Keys and arguments: scripts.py REGISTER_BATCH. A.prior: the span prior of a task with no
-- history (core/history.py prior_span, computed by the caller from K.spans; '' = not computed).
-- Returns {created (0|1), field, value, ...} of the batch hash, or {2} without writing anything
-- when the batch is new, its task has no span yet and no prior was given: the caller computes
-- the prior and calls again (reading the recent spans of all tasks on every registration cost
-- more than the registration itself).
local tenant, task, batch_id, size = A.tenant, A.task, A.batch_id, A.size
local rtype, rollout, now = A.reward_type, A.rollout, A.now
local owner = redis.call('GET', K.owner)
if owner and owner ~= tenant then
  return fail('unknown_task', {task = task, batch_id = batch_id})
end
if redis.call('EXISTS', K.batch) == 1 then
  local cur = redis.call('HMGET', K.batch, 'size', 'reward_type')
  -- a registration without a type, or of a batch without one, never conflicts on the type
  if cur[1] ~= size or (rtype ~= '' and cur[2] and cur[2] ~= rtype) then
    return fail('batch_conflict', {task = task, batch_id = batch_id, size = tonumber(cur[1]),
      reward_type = cur[2] or cjson.null})
  end
  return {0, redis.call('HGETALL', K.batch)}
end
local known = redis.call('GET', K.span)
if not known and A.prior == '' then
  return {2}
end
redis.call('SET', K.owner, tenant)
local span = tonumber(known or A.prior)
-- the anchor is the rollout-start hint, else the registration time (BatchInfo.anchor)
local anchor = tonumber(now)
if rollout ~= '' then anchor = tonumber(rollout) end
-- Eq. 1-2 estimate: the task's latest finished batch shifted to this batch's anchor
-- (core/history.py estimate_completion).
local fields = {'tenant', tenant, 'task', task, 'batch_id', batch_id, 'size', size,
  'registered_at', now, 'estimated_completion', fmt(anchor + span), 'submitted', 0, 'done', 0,
  'k_members', K.members, 'k_results', K.results, 'k_queued', K.queued, 'k_profile', K.profile,
  'k_history', K.history, 'k_span', K.span, 'k_spans', K.spans}
if rtype ~= '' then
  table.insert(fields, 'reward_type'); table.insert(fields, rtype)
end
if rollout ~= '' then
  table.insert(fields, 'rollout_started_at'); table.insert(fields, rollout)
end
redis.call('HSET', K.batch, unpack(fields))
redis.call('ZADD', K.active, now, K.batch)
emit(K.events, A.maxlen, 'batch_registered', now, task, batch_id,
  '{"size":' .. size .. '}')
return {1, redis.call('HGETALL', K.batch)}
