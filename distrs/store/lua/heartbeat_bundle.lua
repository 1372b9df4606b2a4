-- Extend the live leases of a bundle together; each lease answers for itself.
-- KEYS: 1 leases, 2.. one lease key per item
-- ARGV: 1 now, 2 ttl_s, 3 holder, 4.. one lease id per item
-- Returns per item {'ok', deadline} or {'err', code, details JSON}.
local out = {}
for i = 2, #KEYS do
  local deadline, code, details = extend(KEYS[i], KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[i + 2])
  if deadline then
    out[#out + 1] = {'ok', deadline}
  else
    out[#out + 1] = {'err', code, cjson.encode(details)}
  end
end
return out
