-- Shared helpers, prepended to every script at load time (see distrs/store/redis/scripts.py),
-- after the mode's functions (standalone.lua or cluster.lua: emit, span_sample, arrival_base,
-- may_take, usage_counted, usage_hand_back). Nothing here depends on the mode. Keys are never
-- built here: they come in K (the script's named keys), in the rows of L, or are read from
-- records (distrs/store/keys.py).

local function fmt(x)
  -- full double precision; string.format keeps integers and fractions exact enough for JSON
  return string.format('%.17g', x)
end

local function fail(code, details)
  return redis.error_reply('DISTRS ' .. code .. ' ' .. cjson.encode(details))
end

-- A live lease taken by holder (the caller's credential identity) at now: its fields
-- {holder, state, deadline, ...extra}, or nil and the error reply (unknown, another holder's,
-- or expired). Fencing: an expired lease is refused even before the reaper requeued it, and a
-- requeued or finished lease no longer exists, so an old holder can never write over a new one.
-- check_lease answers nil, code, details instead (a bundle reports errors per lease).
local function check_lease(lkey, now, holder, lease_id, ...)
  local l = redis.call('HMGET', lkey, 'holder', 'state', 'deadline', ...)
  if not l[1] or l[2] ~= 'live' then
    return nil, 'unknown_lease', {lease_id = lease_id}
  end
  if l[1] ~= holder then
    return nil, 'lease_not_yours', {lease_id = lease_id}
  end
  if tonumber(l[3]) < tonumber(now) then
    return nil, 'lease_expired', {lease_id = lease_id, deadline = tonumber(l[3])}
  end
  return l
end

local function live_lease(lkey, now, holder, lease_id, ...)
  local l, code, details = check_lease(lkey, now, holder, lease_id, ...)
  if not l then
    return nil, fail(code, details)
  end
  return l
end

local function append_json(arr, item)
  if arr == nil or arr == false or arr == '' or arr == '[]' then
    return '[' .. item .. ']'
  end
  return string.sub(arr, 1, -2) .. ',' .. item .. ']'
end

-- Usage counters (distrs/store/redis/usage.py). A script that changes what a tenant uses counts
-- it in the same step: standalone, it moves the counters itself, so they never drift from the
-- batch records; in cluster mode the counters live in another slot, so it hands the counts back
-- (usage_hand_back: rows {'s', tenant, batch key, n} for accepted requests and {'f', tenant,
-- batch key, n, size, expires_at or ''} for final results) and the store writes them.
-- u: the key prefixes of the four counters as keys.py builds them (uqueued, ubytes, uexpiry,
-- utotals), or nil in cluster mode. A counter write that fails (a key of the wrong type) is
-- skipped, never raised: the transition has already written and must land whole; an exact count
-- repairs it.
local function usage_prefixes(queued, bytes, expiry, totals)
  if queued == nil or queued == '' then
    return nil
  end
  return {queued, bytes, expiry, totals}
end

-- The tenant's part of a usage key: keys.py _part (escapes '%' and ':').
local function usage_tenant(tenant)
  return (string.gsub(string.gsub(tenant, '%%', '%%25'), ':', '%%3A'))
end

-- n requests of batch bkey accepted.
local function usage_submitted(ctx, tenant, bkey, n)
  local u = ctx.usage
  if u then
    local t = usage_tenant(tenant)
    redis.pcall('HINCRBY', u[1] .. t, bkey, n)
    redis.pcall('HINCRBY', u[4] .. t, 'queued', n)
  elseif usage_counted(ctx) then
    usage_hand_back({'s', tenant, bkey, n})
  end
end

-- A final result of size characters; expires_at: when the batch's results expire, if the batch
-- completed with this result (else the batch's expiry stays open, +inf). Summed per batch and
-- per tenant in ctx (a bundle's results mostly share a few batches) and written once, when the
-- script ends, by usage_flush.
local function usage_finished(ctx, tenant, bkey, size, expires_at)
  local acc = ctx.usage_acc
  if not acc then
    acc = {batches = {}, border = {}, tenants = {}, torder = {}}
    ctx.usage_acc = acc
  end
  local b = acc.batches[bkey]
  if not b then
    b = {tenant = tenant, n = 0, size = 0}
    acc.batches[bkey] = b
    acc.border[#acc.border + 1] = bkey
  end
  b.n = b.n + 1
  b.size = b.size + size
  if expires_at then
    b.expires_at = expires_at
  end
  local t = acc.tenants[tenant]
  if not t then
    t = {n = 0, size = 0}
    acc.tenants[tenant] = t
    acc.torder[#acc.torder + 1] = tenant
  end
  t.n = t.n + 1
  t.size = t.size + size
end

-- Write what usage_finished summed, or hand it back where the script has no counter keys (cluster
-- mode); every script that calls finish ends with this.
local function usage_flush(ctx)
  local acc, u = ctx.usage_acc, ctx.usage
  if not acc then
    return
  end
  ctx.usage_acc = nil
  if not u then
    for _, bkey in ipairs(acc.border) do
      local b = acc.batches[bkey]
      local expires_at = ''
      if b.expires_at then expires_at = fmt(b.expires_at) end
      usage_hand_back({'f', b.tenant, bkey, b.n, b.size, expires_at})
    end
    return
  end
  for _, bkey in ipairs(acc.border) do
    local b = acc.batches[bkey]
    local t = usage_tenant(b.tenant)
    if b.expires_at then
      redis.pcall('HDEL', u[1] .. t, bkey)
      redis.pcall('ZADD', u[3] .. t, fmt(b.expires_at), bkey)
    else
      redis.pcall('HINCRBY', u[1] .. t, bkey, -b.n)
      redis.pcall('ZADD', u[3] .. t, 'NX', '+inf', bkey)
    end
    redis.pcall('HINCRBY', u[2] .. t, bkey, b.size)
  end
  for _, tenant in ipairs(acc.torder) do
    local sum, t = acc.tenants[tenant], usage_tenant(tenant)
    redis.pcall('HINCRBY', u[4] .. t, 'queued', -sum.n)
    redis.pcall('HINCRBY', u[4] .. t, 'bytes', sum.size)
  end
end

-- The context of a transition that may finish requests (complete.lua, requeue_expired.lua), from
-- the keys and arguments they share (distrs/store/redis/scripts.py TransitionKeys and
-- TransitionArgs, in their order).
local function transition(leases, events, active, stages, policy, ttl, history_k, maxlen,
                          chan_work, chan_result, u_queued, u_bytes, u_expiry, u_totals)
  return {leases = leases, active = active, events = events, stages = stages,
    chan_work = chan_work, chan_result = chan_result, ttl = ttl, k = history_k, maxlen = maxlen,
    policy = policy, usage = usage_prefixes(u_queued, u_bytes, u_expiry, u_totals)}
end

-- A result's size, as the quotas count it: the length in characters (code points) of the
-- Result's JSON as pydantic writes it (Result.model_dump_json()). The stored JSON differs from
-- that in its spliced parts (cjson escapes '/', stage records carry 17 significant digits), so
-- those parts are measured as pydantic would write them.

-- Characters of a UTF-8 string: its bytes less the continuation bytes.
local function utf8_chars(s)
  if not string.find(s, '[\128-\255]') then
    return #s
  end
  local _, cont = string.gsub(s, '[\128-\191]', '')
  return #s - cont
end

-- Characters of a string as a JSON string: quotes, and pydantic's escapes (2 characters for
-- '"', '\\' and \b \f \n \r \t, 6 for the other control characters; '/' and the rest as is).
local function json_str_chars(s)
  local n = utf8_chars(s) + 2
  if not string.find(s, '[%z\1-\31"\\]') then
    return n
  end
  local _, quoted = string.gsub(s, '["\\]', '')
  local _, ctl = string.gsub(s, '[%z\1-\31]', '')
  local _, named = string.gsub(s, '[\8\9\10\12\13]', '')
  return n + quoted + named + 5 * (ctl - named)
end

-- Characters of a float as pydantic writes it: the shortest digits that read back as the same
-- double; plain notation with at least one decimal ('100.0', '0.00001') for decimal exponents
-- -5..15, else 'd.ddde+X' / 'd.ddde-X'; infinities and NaN as null.
local function json_float_chars(x)
  if x ~= x or x == math.huge or x == -math.huge then
    return 4
  end
  local sign = 0
  if x < 0 or (x == 0 and 1 / x < 0) then
    sign, x = 1, -x
  end
  if x == 0 then
    return sign + 3
  end
  local s, n
  if x >= 2.2250738585072014e-308 then
    -- A normal double's shortest digits, when there are at most 15, are what 15 digits give
    -- less their trailing zeros (a binary ulp is far below a 15-digit step); else 16 or 17.
    -- 16 digits are tried first: durations computed by subtraction mostly need 17.
    s = string.format('%.15e', x)
    if tonumber(s) ~= x then
      n = 17
      if string.byte(s, 1) == 49 and string.find(s, '^1%.0+e') then
        s = string.format('%.16e', x)  -- 16 digits carried into the next power of ten
      end
    else
      local s15 = string.format('%.14e', x)
      if tonumber(s15) == x then
        s = s15
        local mant = string.gsub(string.sub(s, 1, string.find(s, 'e', 1, true) - 1), '0+$', '')
        n = #mant - 1
      else
        n = 16
      end
    end
  else
    -- subnormal (fewer significant bits): fewest digits that round-trip, searched
    local lo, hi = 1, 17
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if tonumber(string.format('%.' .. (mid - 1) .. 'e', x)) == x then
        hi = mid
      else
        lo = mid + 1
      end
    end
    s, n = string.format('%.' .. (lo - 1) .. 'e', x), lo
  end
  local e = tonumber(string.sub(s, string.find(s, 'e', 1, true) + 1))
  if e >= 16 or e < -5 then
    local mant = n
    if n > 1 then mant = n + 1 end
    return sign + mant + 2 + #tostring(math.abs(e))
  elseif e >= 0 then
    if n <= e + 1 then
      return sign + e + 3
    end
    return sign + n + 1
  end
  return sign + n + 1 - e
end

-- Characters of one stage record (core/model.py StageRecord) as pydantic writes it.
local function stage_chars(rec)
  -- {"name":,"worker":,"queued_s":,"run_s":,"outcome":}
  return 51 + json_str_chars(rec.name) + json_str_chars(rec.worker)
    + json_float_chars(rec.queued_s) + json_float_chars(rec.run_s) + json_str_chars(rec.outcome)
end

-- Queue score: the batch's estimated completion T under EBF (DistRS Sec. 5.2), 0 under FCFS so
-- that the member's zero-padded arrival sequence alone orders the queue.
local function queue_score(policy, bkey)
  if policy == 'ebf' then
    return redis.call('HGET', bkey, 'estimated_completion') or '0'
  end
  return '0'
end

-- bq: the batch's queued-set key when the caller has it (submit), else read from the request;
-- stages_key false: the caller adds the stage to the stage set itself (once per call).
local function enqueue(qkey, stages_key, stage, reqkey, seq, score, now, bq)
  local member = string.format('%020d', tonumber(seq)) .. reqkey
  redis.call('ZADD', qkey, score, member)
  bq = bq or redis.call('HGET', reqkey, 'k_queued')
  redis.call('ZADD', bq, now, stage .. '\n' .. reqkey)
  if stages_key then
    redis.call('SADD', stages_key, stage)
  end
  return member
end

-- Mark a batch complete: profile into the task history (last K), extra delay, event, TTLs.
local function complete_batch(bkey, now, ctx)
  local b = redis.call('HMGET', bkey, 'task', 'batch_id', 'reward_type', 'rollout_started_at',
    'registered_at', 'tmax', 'k_members', 'k_results', 'k_queued', 'k_profile', 'k_history',
    'k_span', 'k_spans')
  local task, batch_id, rtype = b[1], b[2], b[3]
  local anchor = tonumber(b[4] or b[5] or now)
  local tmax = tonumber(b[6] or '0')
  -- Eq. 1-2: T = max_i (r_i + sum_j s_ij), measured; extra delay d = actual completion - T.
  local earliest = anchor + tmax
  local extra = tonumber(now) - earliest
  if extra < 0 then extra = 0 end
  -- request profiles in submission order (fields are zero-padded arrival sequences)
  local flat = redis.call('HGETALL', b[10])
  local fields, by_field = {}, {}
  for i = 1, #flat, 2 do
    fields[#fields + 1] = flat[i]
    by_field[flat[i]] = flat[i + 1]
  end
  table.sort(fields)
  local entries = {}
  for i, f in ipairs(fields) do
    entries[i] = by_field[f]
  end
  local rt_json = 'null'
  if rtype then rt_json = cjson.encode(rtype) end
  local profile = '{"task":' .. cjson.encode(task) .. ',"batch_id":' .. cjson.encode(batch_id)
    .. ',"anchor":' .. fmt(anchor) .. ',"reward_type":' .. rt_json
    .. ',"requests":[' .. table.concat(entries, ',') .. ']}'
  redis.call('RPUSH', b[11], profile)
  redis.call('LTRIM', b[11], -tonumber(ctx.k), -1)
  redis.call('SET', b[12], fmt(tmax))
  if b[13] then
    -- every task's recent spans: the prior of a new task of the same type (core/history.py)
    local sample = '{"rt":' .. rt_json .. ',"at":' .. fmt(tonumber(now)) .. ',"span":' .. fmt(tmax)
      .. '}'
    span_sample(b[13], sample)
  end
  redis.call('HSET', bkey, 'completed_at', now, 'earliest_completion', fmt(earliest),
    'extra_delay_s', fmt(extra))
  redis.call('ZREM', ctx.active, bkey)
  -- wakes the callers that wait for the whole batch (redis/base.py COMPLETED)
  redis.call('PUBLISH', ctx.chan_result, bkey .. '\ncompleted')
  local data = '{"extra_delay_s":' .. fmt(extra) .. ',"earliest_completion":' .. fmt(earliest) .. '}'
  emit(ctx.events, ctx.maxlen, 'batch_completed', now, task, batch_id, data)
  -- Finished batches live for result_ttl_s, requests with them.
  local ttl = ctx.ttl
  local members = redis.call('LRANGE', b[7], 0, -1)
  for i = 1, #members do
    redis.call('EXPIRE', members[i], ttl)
  end
  redis.call('EXPIRE', bkey, ttl)
  redis.call('EXPIRE', b[7], ttl)
  redis.call('EXPIRE', b[8], ttl)
  redis.call('DEL', b[9], b[10])
end

-- Record a request's final result (exactly once) and complete its batch when it is the last.
-- result_body: the Result JSON without "request_id" and "stages"; both are spliced in here.
-- last_stage: a stage record JSON to append to the request's stages first (or nil), written
-- with the result in one HSET. body_chars: result_body's length as pydantic writes it, when the
-- script wrote it (else result_body came from pydantic and is measured as it is). The usage it
-- changes is summed in ctx until the script calls usage_flush.
local function finish(reqkey, result_body, status, now, ctx, last_stage, body_chars)
  local r = redis.call('HMGET', reqkey, 'k_batch', 'seq', 'stages', 'arrived_at', 'request_id',
    'tenant')
  local bkey, seq, stages = r[1], r[2], r[3]
  if last_stage then
    stages = append_json(stages, last_stage)
  end
  local result = '{"request_id":' .. cjson.encode(r[5]) .. ',' .. string.sub(result_body, 2, -2)
    .. ',"stages":' .. stages .. '}'
  -- 'lease' '': held by no lease (written in the same command rather than deleted by another)
  redis.call('HSET', reqkey, 'state', 'done', 'result', result, 'artifacts', '{}', 'stages', stages,
    'lease', '')
  local b = redis.call('HMGET', bkey, 'k_results', 'k_profile', 'rollout_started_at',
    'registered_at', 'size', 'tmax', 'completed_at')
  redis.call('HSET', b[1], string.format('%020d', tonumber(seq)), result)
  -- Profile of this request (core/accounting.py request_profile): r_i after the batch anchor
  -- and s_ij summed per stage over its stage records.
  local anchor = tonumber(b[3] or b[4])
  local rel = tonumber(r[4]) - anchor
  local s = {}
  local names = {}
  local total = 0
  local u = r[6] and usage_counted(ctx)
  -- {"request_id":X,BODY,"stages":[S,...]}: 14 + X + 1 + (BODY less its braces) + 10 + 2 + S...
  -- + commas + 1
  local size = 0
  if u then
    size = 14 + json_str_chars(r[5]) + 1 + (body_chars or utf8_chars(result_body)) - 2 + 10 + 2 + 1
  end
  local nstages = 0
  for _, rec in ipairs(cjson.decode(stages)) do
    if u then
      size = size + stage_chars(rec)
      nstages = nstages + 1
    end
    if s[rec.name] == nil then
      s[rec.name] = 0
      names[#names + 1] = rec.name
    end
    s[rec.name] = s[rec.name] + rec.run_s
    total = total + rec.run_s
  end
  local parts = {}
  for i, name in ipairs(names) do
    parts[i] = cjson.encode(name) .. ':' .. fmt(s[name])
  end
  redis.call('HSET', b[2], string.format('%020d', tonumber(seq)), '{"r":' .. fmt(rel) .. ',"s":{' .. table.concat(parts, ',')
    .. '},"status":' .. cjson.encode(status) .. '}')
  -- t_i = r_i + sum_j s_ij (Eq. 1); the batch keeps the running max T (Eq. 2)
  local t_i = rel + total
  if b[6] == false or t_i > tonumber(b[6]) then
    redis.call('HSET', bkey, 'tmax', fmt(t_i))
  end
  local done = redis.call('HINCRBY', bkey, 'done', 1)
  redis.call('PUBLISH', ctx.chan_result, bkey)
  local completed = done >= tonumber(b[5]) and not b[7]
  if completed then
    complete_batch(bkey, now, ctx)
  end
  if u then
    if nstages > 1 then
      size = size + nstages - 1  -- the commas between stage records
    end
    local expires_at = completed and tonumber(now) + tonumber(ctx.ttl) or nil
    usage_finished(ctx, r[6], bkey, size, expires_at)
  end
  return completed and 1 or 0
end

local function stage_record(stage, worker, queued_s, run_s, outcome)
  return '{"name":' .. cjson.encode(stage) .. ',"worker":' .. cjson.encode(worker)
    .. ',"queued_s":' .. fmt(queued_s) .. ',"run_s":' .. fmt(run_s)
    .. ',"outcome":' .. cjson.encode(outcome) .. '}'
end

-- Take the head of a stage queue for a worker until now + ttl (lease.lua, lease_bundle.lua).
-- Returns false when the queue is empty, else {request_id, task, batch_id, reward_type, payload,
-- artifacts, attempt, deadline}.
local function take_head(qkey, leases_key, lkey, now, ttl, worker, lease_id, stage, holder)
  now = tonumber(now)
  -- A lease id is taken once. The same script can run twice with the same ids: a client that
  -- lost the connection before the reply sends it again (redis-py's cluster client does, after
  -- a reconnect). The second run answers the lease the first one took instead of taking another
  -- request under the same key, which would strand the first request as running with no lease.
  local held = redis.call('HMGET', lkey, 'request_id', 'task', 'batch_id', 'attempt', 'deadline',
    'k_req', 'holder')
  if held[1] then
    if held[7] ~= holder then
      return false
    end
    local r = redis.call('HMGET', held[6], 'reward_type', 'payload', 'artifacts')
    return {held[1], held[2], held[3], r[1], r[2], r[3], tonumber(held[4]), held[5]}
  end
  while true do
    if not may_take(qkey) then
      return false
    end
    local head = redis.call('ZPOPMIN', qkey, 1)
    if #head == 0 then
      return false
    end
    local member = head[1]
    local reqkey = string.sub(member, 21)
    local r = redis.call('HMGET', reqkey, 'request_id', 'task', 'batch_id', 'reward_type', 'payload',
      'artifacts', 'stage_enqueued_at', 'k_queued', 'state', 'attempts')
    -- a queue entry whose request vanished (expired or deleted by an operator) is dropped
    if r[1] and r[9] == 'queued' then
      redis.call('ZREM', r[8], stage .. '\n' .. reqkey)
      local attempt = tonumber(r[10] or '0') + 1
      redis.call('HSET', reqkey, 'state', 'running', 'lease', lkey, 'attempts', attempt)
      local deadline = fmt(now + tonumber(ttl))
      redis.call('HSET', lkey, 'lease_id', lease_id, 'k_req', reqkey, 'k_queue', qkey,
        'member', member, 'stage', stage, 'worker', worker, 'holder', holder, 'deadline', deadline,
        'started_at', fmt(now), 'attempt', attempt,
        'queued_s', fmt(math.max(0, now - tonumber(r[7]))),
        'state', 'live', 'request_id', r[1], 'task', r[2], 'batch_id', r[3])
      redis.call('ZADD', leases_key, deadline, lkey)
      return {r[1], r[2], r[3], r[4], r[5], r[6], attempt, deadline}
    end
  end
end

-- Extend a live lease (heartbeat.lua, heartbeat_bundle.lua): the new deadline, or nil, code,
-- details.
local function extend(lkey, leases_key, now, ttl, holder, lease_id)
  local l, code, details = check_lease(lkey, now, holder, lease_id)
  if not l then
    return nil, code, details
  end
  local deadline = fmt(tonumber(now) + tonumber(ttl))
  redis.call('HSET', lkey, 'deadline', deadline)
  redis.call('ZADD', leases_key, deadline, lkey)
  return deadline
end

-- The stage after stage on a request's route and its queue key: route is the request's 'route'
-- field, JSON [[stage, queue key], ...] (absent for a route of one stage); nil at its end.
local function next_on_route(route, stage)
  if not route then
    return nil
  end
  local hops = cjson.decode(route)
  for i = 1, #hops - 1 do
    if hops[i][1] == stage then
      return hops[i + 1][1], hops[i + 1][2]
    end
  end
  return nil
end

-- Finish a live lease (complete.lua): 'next' moves the request on to the next stage of its route
-- (with it.artifacts; '' keeps them), 'final' records its result. Returns batch_completed (0|1)
-- and the request key, or nil, code, details, having written nothing (a 'next' at the last stage
-- of the route is refused). ctx: lib.lua transition.
local function complete_one(it, holder, now, ctx)
  local l, code, details = check_lease(it.lease, now, holder, it.lease_id, 'k_req', 'stage',
    'queued_s', 'worker')
  if not l then
    return nil, code, details
  end
  local reqkey, stage = l[4], l[5]
  local r, next_stage, qkey
  if it.outcome == 'next' then
    r = redis.call('HMGET', reqkey, 'seq', 'k_batch', 'stages', 'route')
    next_stage, qkey = next_on_route(r[4], stage)
    if not next_stage then
      return nil, 'no_next_stage', {lease_id = it.lease_id, stage = stage}
    end
  end
  redis.call('DEL', it.lease)
  redis.call('ZREM', ctx.leases, it.lease)
  local record = stage_record(stage, l[7], tonumber(l[6]), tonumber(it.run_s), it.outcome)
  if not next_stage then
    return finish(reqkey, it.result, it.status, now, ctx, record), reqkey
  end
  -- max_attempts counts per stage
  local fields = {'stages', append_json(r[3], record), 'state', 'queued', 'stage', next_stage,
    'stage_enqueued_at', now, 'attempts', 0, 'lease', ''}
  if it.artifacts ~= '' then
    fields[#fields + 1] = 'artifacts'
    fields[#fields + 1] = it.artifacts
  end
  redis.call('HSET', reqkey, unpack(fields))
  enqueue(qkey, ctx.stages, next_stage, reqkey, r[1], queue_score(ctx.policy, r[2]), now)
  redis.call('PUBLISH', ctx.chan_work, next_stage .. '\n1')
  return 0, reqkey
end
