#!/bin/sh
# Form the release's Redis Cluster, once.
#
# Waits until every node (<statefulset>-0 .. -<NODES-1> under DOMAIN) answers, then:
# - no node knows another: a fresh install, so `redis-cli --cluster create` with REPLICAS
#   replicas per primary;
# - every node is already in the cluster: nothing to do (upgrades run this again);
# - some nodes are, some are not (more primaries asked for, or a node whose volume was lost):
#   fail, naming them; joining nodes to a cluster that holds data is an operator's decision
#   (docs/kubernetes.md "Redis Cluster in the release").
# Then waits for cluster_state:ok on every node and prints `redis-cli --cluster check`.
set -eu
export REDISCLI_AUTH="$REDIS_PASSWORD"
addrs=""
i=0
while [ "$i" -lt "$NODES" ]; do
  host="$STATEFULSET-$i.$DOMAIN"
  while :; do
    ip=$(getent hosts "$host" | awk '{ print $1; exit }') || ip=""
    if [ -n "$ip" ] && redis-cli -h "$ip" -p 6379 ping 2>/dev/null | grep -q PONG; then
      break
    fi
    echo "waiting for $host"
    sleep 2
  done
  addrs="$addrs $ip:6379"
  i=$((i + 1))
done

known_nodes() {
  redis-cli -h "${1%:*}" -p 6379 cluster info | tr -d '\r' | sed -n 's/^cluster_known_nodes://p'
}
joined=""
alone=""
for a in $addrs; do
  if [ "$(known_nodes "$a")" -gt 1 ]; then joined="$joined $a"; else alone="$alone $a"; fi
done
first=${addrs# }
first=${first%% *}
if [ -z "$joined" ]; then
  echo "forming a cluster of $NODES nodes, $REPLICAS replica(s) per primary:$addrs"
  # shellcheck disable=SC2086
  redis-cli --cluster create $addrs --cluster-replicas "$REPLICAS" --cluster-yes
elif [ -n "$alone" ]; then
  echo "the cluster is formed, but these nodes are not in it:$alone" >&2
  echo "add them with redis-cli --cluster add-node (then rebalance), see docs/kubernetes.md" >&2
  exit 1
else
  echo "the cluster is already formed; nothing to do"
fi
for a in $addrs; do
  until redis-cli -h "${a%:*}" -p 6379 cluster info | tr -d '\r' | grep -qx 'cluster_state:ok'; do
    echo "waiting for cluster_state:ok on $a"
    sleep 1
  done
done
redis-cli --cluster check "$first" || true
echo "cluster_state:ok on all $NODES nodes"
