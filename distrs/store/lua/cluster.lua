-- Cluster mode (distrs/store/redis/topology/cluster.py): a script may touch only its own slot.
-- Prepended to every script before its named keys and arguments and lib.lua. The first three
-- ARGV are the caller's arrival-sequence base (submit), the lease's bound ('' = none) and the
-- slot's fence key; what the script produces for other slots (planner events, span samples,
-- usage counts) is collected here and comes back with its result as {result, events, spans,
-- usage}.
local CLUSTER = {seq = table.remove(ARGV, 1), bound = table.remove(ARGV, 1),
  fence = table.remove(ARGV, 1), events = {}, spans = {}, usage = {}}
-- in a slot being migrated this two-key read is refused: stop before any write (TRYAGAIN)
local distrs_fenced = redis.pcall('EXISTS', KEYS[1], CLUSTER.fence)
if type(distrs_fenced) == 'table' and distrs_fenced.err then
  return redis.error_reply('TRYAGAIN slot of ' .. KEYS[1] .. ' is migrating')
end

-- The events stream lives in another slot: the event is handed back.
local function emit(events_key, maxlen, typ, ts, task, batch_id, data)
  CLUSTER.events[#CLUSTER.events + 1] = {typ, tostring(ts), task, batch_id, data}
end

-- So do every task's recent spans.
local function span_sample(spans_key, sample)
  CLUSTER.spans[#CLUSTER.spans + 1] = sample
end

-- The arrival sequence before n new requests: taken by the caller from the global counter.
local function arrival_base(seq_key, n)
  return tonumber(CLUSTER.seq)
end

-- Whether the head of qkey comes before CLUSTER.bound ("score LF seq"), the head of the next
-- task queue in line (a lease reads every task queue's head and takes from the earliest). Same
-- order as one queue: (score, arrival seq). An empty queue: nothing to take anyway.
local function may_take(qkey)
  if CLUSTER.bound == '' then
    return true
  end
  local h = redis.call('ZRANGE', qkey, 0, 0, 'WITHSCORES')
  if #h == 0 then
    return true
  end
  local nl = string.find(CLUSTER.bound, '\n', 1, true)
  local bscore, bseq = tonumber(string.sub(CLUSTER.bound, 1, nl - 1)), string.sub(CLUSTER.bound, nl + 1)
  local score = tonumber(h[2])
  return score < bscore or (score == bscore and string.sub(h[1], 1, 20) <= bseq)
end

-- The usage counters live under the tenant's tag: counted here, handed back, written by the store.
local function usage_counted(ctx)
  return true
end

local function usage_hand_back(row)
  CLUSTER.usage[#CLUSTER.usage + 1] = row
end
