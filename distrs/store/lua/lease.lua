-- Take up to n heads of a stage queue, in queue order (EBF, FCFS within a batch), each as its
-- own lease until now + ttl: one round trip for a bundle, the per-request guarantees unchanged.
-- Keys and arguments: scripts.py LEASE (L.new: one row per lease to take, its key and id).
-- Returns a list of {request_id, task, batch_id, reward_type, payload, artifacts, attempt,
-- deadline}, possibly empty, in queue order; the i-th uses the i-th row of L.new.
local out = {}
for _, it in ipairs(L.new) do
  local got = take_head(K.queue, K.leases, it.lease, A.now, A.ttl, A.worker, it.lease_id, A.stage,
    A.holder)
  if not got then
    break
  end
  out[#out + 1] = got
end
return out
