-- Take up to n heads of a stage queue, in queue order (EBF, FCFS within a batch), each as its
-- own lease until now + ttl: one round trip for a bundle, the per-request guarantees unchanged.
-- KEYS: 1 stage queue, 2 leases, 3.. one lease key per item (n = #KEYS - 2)
-- ARGV: 1 now, 2 ttl_s, 3 worker_id, 4 stage, 5 holder, 6.. one lease id per item
-- Returns a list of {request_id, task, batch_id, reward_type, payload, artifacts, attempt,
-- deadline}, possibly empty, in queue order; the i-th uses the i-th lease key and id.
local out = {}
for i = 3, #KEYS do
  local got = take_head(KEYS[1], KEYS[2], KEYS[i], ARGV[1], ARGV[2], ARGV[3], ARGV[i + 3], ARGV[4],
    ARGV[5])
  if not got then
    break
  end
  out[#out + 1] = got
end
return out
