-- Submit requests (idempotent per (task, request_id)), all or nothing per call.
-- Keys and arguments: scripts.py SUBMIT. L.groups: one row per batch of the call, whose n
-- requests follow each other in L.requests (each with its first stage's queue key and, for a
-- route of more than one stage, the whole route with every stage's queue key).
-- Returns a flag per request in input order: 1 accepted, 0 duplicate.
local now, policy = A.now, A.policy
local groups = {}
local ctx = {usage = usage_prefixes(A.u_queued, A.u_bytes, A.u_expiry, A.u_totals)}
local ri = 1
local seen = {}
-- pass 1: validate everything before writing anything
for g, grp in ipairs(L.groups) do
  grp.n = tonumber(grp.n)
  grp.reqs = {}
  local owner = redis.call('GET', grp.owner)
  if owner ~= grp.tenant or redis.call('EXISTS', grp.batch) == 0 then
    return fail('unknown_batch', {task = grp.task, batch_id = grp.batch_id})
  end
  local new = 0
  for i = 1, grp.n do
    local req = L.requests[ri]
    ri = ri + 1
    if seen[req.request] or redis.call('EXISTS', req.request) == 1 then
      req.dup = true
    else
      req.dup = false
      new = new + 1
    end
    seen[req.request] = true
    grp.reqs[i] = req
  end
  local b = redis.call('HMGET', grp.batch, 'size', 'submitted')
  grp.new = new
  -- several groups may name the same batch: count what earlier groups add
  local pending = 0
  for h = 1, g - 1 do
    if groups[h].batch == grp.batch then pending = pending + groups[h].new end
  end
  if tonumber(b[2]) + pending + new > tonumber(b[1]) then
    return fail('batch_full', {task = grp.task, batch_id = grp.batch_id, size = tonumber(b[1]),
      submitted = tonumber(b[2]) + pending, new = new})
  end
  groups[g] = grp
end
-- pass 2: write. Arrival sequences are taken at once (standalone.lua, cluster.lua arrival_base:
-- consecutive numbers, as one INCR per request would give).
local total = 0
for g = 1, #groups do total = total + groups[g].new end
local seq = arrival_base(K.seq, total)
local flags = {}
local woken = {}
for _, grp in ipairs(groups) do
  local bkey = grp.batch
  if grp.new > 0 then
    local b = redis.call('HMGET', bkey, 'first_arrival_at', 'reward_type', 'k_span',
      'k_members', 'k_queued')
    if not b[1] then
      redis.call('HSET', bkey, 'first_arrival_at', now)
      emit(K.events, A.maxlen, 'first_arrival', now, grp.task, grp.batch_id, '{}')
    end
    if not b[2] then
      -- a batch registered without a type takes the type of its first request
      for i = 1, grp.n do
        if not grp.reqs[i].dup then
          redis.call('HSET', bkey, 'reward_type', grp.reqs[i].reward_type)
          break
        end
      end
    end
    redis.call('HINCRBY', bkey, 'submitted', grp.new)
    usage_submitted(ctx, grp.tenant, bkey, grp.new)
    local score = queue_score(policy, bkey)
    for i = 1, grp.n do
      local req = grp.reqs[i]
      if not req.dup then
        seq = seq + 1
        local fields = {'tenant', grp.tenant, 'task', grp.task, 'batch_id', grp.batch_id,
          'request_id', req.request_id, 'reward_type', req.reward_type, 'payload', req.payload,
          'arrived_at', now, 'state', 'queued', 'stage', req.stage, 'stage_enqueued_at', now,
          'attempts', 0, 'seq', seq, 'artifacts', '{}', 'stages', '[]', 'k_batch', bkey,
          'k_queued', b[5]}
        if req.route ~= '' then
          fields[#fields + 1] = 'route'
          fields[#fields + 1] = req.route
        end
        redis.call('HSET', req.request, unpack(fields))
        redis.call('RPUSH', b[4], req.request)
        enqueue(req.queue, false, req.stage, req.request, seq, score, now, b[5])
        woken[req.stage] = (woken[req.stage] or 0) + 1
      end
    end
  end
  for i = 1, grp.n do
    flags[#flags + 1] = grp.reqs[i].dup and 0 or 1
  end
end
for stage, count in pairs(woken) do
  redis.call('SADD', K.stages, stage)  -- once per stage, not per request (enqueue)
  redis.call('PUBLISH', A.chan_work, stage .. '\n' .. count)
end
return flags
