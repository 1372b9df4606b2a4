-- Finish live leases, each for itself: one refused lease (expired, unknown, another holder's, a
-- 'next' at the last stage of its route) never keeps the others from landing. 'next' moves the
-- request on along the route stored at submit, in this same step; 'final' records the result.
-- Keys and arguments: scripts.py COMPLETE (L.items: one row per lease).
-- Returns per item {'ok', batch_completed (0|1), request hash as field, value, ...} or
-- {'err', code, details JSON}.
local ctx = transition(K.leases, K.events, K.active, K.stages, A.policy, A.ttl, A.history_k,
  A.maxlen, A.chan_work, A.chan_result, A.u_queued, A.u_bytes, A.u_expiry, A.u_totals)
local out = {}
for i, it in ipairs(L.items) do
  local completed, reqkey, details = complete_one(it, A.holder, A.now, ctx)
  if completed then
    out[i] = {'ok', completed, redis.call('HGETALL', reqkey)}
  else
    out[i] = {'err', reqkey, cjson.encode(details)}
  end
end
usage_flush(ctx)
return out
