-- Cluster mode: unmark tasks a lease found with an empty stage queue, each only if its mark is
-- still the generation the lease read before it looked at the queue: a newer mark means work
-- arrived since, and the task stays (mark_ready.lua).
-- KEYS: ready index of a stage, one per task
-- ARGV: task, generation read; one pair per key
-- Returns how many tasks were unmarked.
local n = 0
for i = 1, #KEYS do
  local gen = redis.call('ZSCORE', KEYS[i], ARGV[2 * i - 1])
  if gen and tonumber(gen) == tonumber(ARGV[2 * i]) then
    redis.call('ZREM', KEYS[i], ARGV[2 * i - 1])
    n = n + 1
  end
end
return n
