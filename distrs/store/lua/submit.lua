-- Submit requests (idempotent per (task, request_id)), all or nothing per call.
-- KEYS: 1 seq, 2 events, 3 stages; then per batch group g: owner, batch;
--       then per request: request key, queue key (of its first stage)
-- ARGV: 1 now, 2 policy, 3 default_span_s, 4 events maxlen, 5 work channel, 6 number of groups,
--       7-10 usage key prefixes (standalone; '' in cluster mode: lib.lua usage_prefixes);
--       per group: tenant, task, batch_id, n; per request: request_id, reward_type, first_stage, payload
-- Returns a flag per request in input order: 1 accepted, 0 duplicate.
local now, policy = ARGV[1], ARGV[2]
local ngroups = tonumber(ARGV[6])
local groups = {}
local usage = usage_prefixes(ARGV[7], ARGV[8], ARGV[9], ARGV[10])
local ki, ai = 4, 11
local seen = {}
-- pass 1: validate everything before writing anything
for g = 1, ngroups do
  local grp = {owner = KEYS[ki], bkey = KEYS[ki + 1], tenant = ARGV[ai], task = ARGV[ai + 1],
    batch_id = ARGV[ai + 2], n = tonumber(ARGV[ai + 3]), reqs = {}}
  ki = ki + 2
  ai = ai + 4
  local owner = redis.call('GET', grp.owner)
  if owner ~= grp.tenant or redis.call('EXISTS', grp.bkey) == 0 then
    return fail('unknown_batch', {task = grp.task, batch_id = grp.batch_id})
  end
  local new = 0
  for i = 1, grp.n do
    local req = {key = KEYS[ki], qkey = KEYS[ki + 1], request_id = ARGV[ai],
      reward_type = ARGV[ai + 1], stage = ARGV[ai + 2], payload = ARGV[ai + 3]}
    ki = ki + 2
    ai = ai + 4
    if seen[req.key] or redis.call('EXISTS', req.key) == 1 then
      req.dup = true
    else
      req.dup = false
      new = new + 1
    end
    seen[req.key] = true
    grp.reqs[i] = req
  end
  local b = redis.call('HMGET', grp.bkey, 'size', 'submitted')
  grp.new = new
  -- several groups may name the same batch: count what earlier groups add
  local pending = 0
  for h = 1, g - 1 do
    if groups[h].bkey == grp.bkey then pending = pending + groups[h].new end
  end
  if tonumber(b[2]) + pending + new > tonumber(b[1]) then
    return fail('batch_full', {task = grp.task, batch_id = grp.batch_id, size = tonumber(b[1]),
      submitted = tonumber(b[2]) + pending, new = new})
  end
  groups[g] = grp
end
-- pass 2: write. Arrival sequences are taken in one INCRBY (the script is atomic, so they are
-- the same consecutive numbers one INCR per request would give).
local total = 0
for g = 1, ngroups do total = total + groups[g].new end
local seq = 0
if CLUSTER then
  seq = tonumber(CLUSTER.seq)  -- taken by the caller from the global counter (another slot)
elseif total > 0 then
  seq = redis.call('INCRBY', KEYS[1], total) - total
end
local flags = {}
local woken = {}
for g = 1, ngroups do
  local grp = groups[g]
  local bkey = grp.bkey
  if grp.new > 0 then
    local b = redis.call('HMGET', bkey, 'first_arrival_at', 'reward_type', 'k_span',
      'k_members', 'k_queued')
    if not b[1] then
      redis.call('HSET', bkey, 'first_arrival_at', now)
      emit(KEYS[2], ARGV[4], 'first_arrival', now, grp.task, grp.batch_id, '{}')
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
    if usage then
      usage_submitted(usage, grp.tenant, bkey, grp.new)
    end
    local score = queue_score(policy, bkey)
    for i = 1, grp.n do
      local req = grp.reqs[i]
      if not req.dup then
        seq = seq + 1
        redis.call('HSET', req.key, 'tenant', grp.tenant, 'task', grp.task, 'batch_id', grp.batch_id,
          'request_id', req.request_id, 'reward_type', req.reward_type, 'payload', req.payload,
          'arrived_at', now, 'state', 'queued', 'stage', req.stage, 'stage_enqueued_at', now,
          'attempts', 0, 'seq', seq, 'artifacts', '{}', 'stages', '[]', 'k_batch', bkey,
          'k_queued', b[5])
        redis.call('RPUSH', b[4], req.key)
        enqueue(req.qkey, false, req.stage, req.key, seq, score, now, b[5])
        woken[req.stage] = (woken[req.stage] or 0) + 1
      end
    end
  end
  for i = 1, grp.n do
    flags[#flags + 1] = grp.reqs[i].dup and 0 or 1
  end
end
for stage, count in pairs(woken) do
  redis.call('SADD', KEYS[3], stage)  -- once per stage, not per request (enqueue)
  redis.call('PUBLISH', ARGV[5], stage .. '\n' .. count)
end
return flags
