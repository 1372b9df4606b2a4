-- Give a live lease back unworked (a draining worker got work as it was told to stop): the
-- request returns to its place in the stage queue and the attempt is not counted.
-- Keys and arguments: scripts.py RELEASE.
-- Returns {stage, task}.
local l, err = live_lease(K.lease, A.now, A.holder, A.lease_id, 'k_req', 'k_queue', 'stage', 'task')
if not l then
  return err
end
local reqkey = l[4]
redis.call('DEL', K.lease)
redis.call('ZREM', K.leases, K.lease)
local r = redis.call('HMGET', reqkey, 'seq', 'k_batch', 'stage_enqueued_at', 'attempts')
-- held by no lease, and this attempt not counted
redis.call('HSET', reqkey, 'state', 'queued', 'lease', '', 'attempts', tonumber(r[4]) - 1)
-- same member and score: back at its place in the batch's order (FCFS within the batch)
-- and its queued time still counts from when it joined the stage
enqueue(l[5], K.stages, l[6], reqkey, r[1], queue_score(A.policy, r[2]), r[3] or A.now)
redis.call('PUBLISH', A.chan_work, l[6] .. '\n1')
return {l[6], l[7]}
