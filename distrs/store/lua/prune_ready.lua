-- Cluster mode: unmark tasks a lease found with an empty stage queue, each only if its mark is
-- still the generation the lease read before it looked at the queue: a newer mark means work
-- arrived since, and the task stays (mark_ready.lua).
-- Keys and arguments: scripts.py PRUNE_READY (L.unmarks: ready index, task, generation read).
-- Returns how many tasks were unmarked.
local n = 0
for _, u in ipairs(L.unmarks) do
  local gen = redis.call('ZSCORE', u.ready, u.task)
  if gen and tonumber(gen) == tonumber(u.gen) then
    redis.call('ZREM', u.ready, u.task)
    n = n + 1
  end
end
return n
