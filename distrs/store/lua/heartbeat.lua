-- Extend live leases; each lease answers for itself.
-- Keys and arguments: scripts.py HEARTBEAT (L.leases: one row per lease).
-- Returns per lease {'ok', deadline} or {'err', code, details JSON}.
local out = {}
for i, it in ipairs(L.leases) do
  local deadline, code, details = extend(it.lease, K.leases, A.now, A.ttl, A.holder, it.lease_id)
  if deadline then
    out[i] = {'ok', deadline}
  else
    out[i] = {'err', code, cjson.encode(details)}
  end
end
return out
