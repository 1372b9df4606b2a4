-- Standalone and Sentinel mode (distrs/store/redis/topology/standalone.py): every key lives in
-- one slot, so a script writes the global keys itself. Prepended to every script before its
-- named keys and arguments and lib.lua; cluster.lua defines the same functions for a cluster.

-- Append a planner event to the stream.
local function emit(events_key, maxlen, typ, ts, task, batch_id, data)
  return redis.call('XADD', events_key, 'MAXLEN', '~', maxlen, '*',
    'type', typ, 'ts', ts, 'task', task, 'batch_id', batch_id, 'data', data)
end

-- Record a finished batch's span sample among every task's recent ones (core/history.py).
local function span_sample(spans_key, sample)
  redis.call('LPUSH', spans_key, sample)
  redis.call('LTRIM', spans_key, 0, 255)  -- SPAN_SAMPLES in core/history.py
end

-- The arrival sequence before n new requests: taken here, from the global counter.
local function arrival_base(seq_key, n)
  if n == 0 then
    return 0
  end
  return redis.call('INCRBY', seq_key, n) - n
end

-- Whether a lease may take the head of qkey: one queue per stage holds the whole order.
local function may_take(qkey)
  return true
end

-- Usage is counted where the script is given the counters' keys (it writes them itself).
local function usage_counted(ctx)
  return ctx.usage ~= nil
end

local function usage_hand_back(row)
  error('usage counts are written by the script in standalone mode')
end
