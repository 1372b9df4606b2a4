-- Take the head of a stage queue and lease it to a worker until now + ttl.
-- KEYS: 1 stage queue, 2 leases, 3 lease key
-- ARGV: 1 now, 2 ttl_s, 3 worker_id, 4 lease_id, 5 stage, 6 holder (credential identity)
-- Returns nil when the queue is empty, else {request_id, task, batch_id, reward_type, payload,
-- artifacts, attempt, deadline}.
return take_head(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6])
