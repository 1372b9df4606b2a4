-- Cluster mode: mark tasks whose stage queue gained work in the per-stage ready index
-- (keys.py). Each mark takes a fresh generation from one counter, so a lease that read an older
-- generation and then found the queue empty can tell that work arrived since (prune_ready.lua).
-- KEYS: 1 generation counter, 2.. ready index of a stage
-- ARGV: the task for each ready index key, in the same order
-- Returns the generation of each mark.
local out = {}
for i = 2, #KEYS do
  local gen = redis.call('INCR', KEYS[1])
  redis.call('ZADD', KEYS[i], gen, ARGV[i - 1])
  out[#out + 1] = gen
end
return out
