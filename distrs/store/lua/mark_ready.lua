-- Cluster mode: mark tasks whose stage queue gained work in the per-stage ready index
-- (keys.py). Each mark takes a fresh generation from one counter, so a lease that read an older
-- generation and then found the queue empty can tell that work arrived since (prune_ready.lua).
-- Keys and arguments: scripts.py MARK_READY (L.marks: a stage's ready index and the task).
-- Returns the generation of each mark.
local out = {}
for i, m in ipairs(L.marks) do
  local gen = redis.call('INCR', K.gen)
  redis.call('ZADD', m.ready, gen, m.task)
  out[i] = gen
end
return out
