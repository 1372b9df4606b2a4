-- Store a request's route where it has none: a request submitted by a release that kept its
-- first stage only (docs/store.md, "Upgrading from a release without stored routes"). A request
-- that has a route keeps it, and a request key that is gone is not created again.
-- Keys and arguments: scripts.py STORE_ROUTE.
-- Returns 1 when it stored the route, else 0.
if redis.call('EXISTS', K.request) == 0 then
  return 0
end
return redis.call('HSETNX', K.request, 'route', A.route)
