#!/bin/sh
# Readiness of one Redis Cluster node.
#
# Before the cluster is formed a node that answers is ready (the formation Job waits for that,
# and `helm install --wait` waits for the pods before it runs the Job). Once formed, a node is
# ready only while the cluster serves every slot and, on a replica, while its replication link
# is up: a rolling update then moves to the next pod only after the restarted one has caught up,
# so a primary and its replica are never both restarting.
export REDISCLI_AUTH="$REDIS_PASSWORD"
info=$(redis-cli -p 6379 cluster info | tr -d '\r') || exit 1
case "$info" in *cluster_known_nodes:*) ;; *) exit 1 ;; esac
if printf '%s\n' "$info" | grep -qx 'cluster_known_nodes:1'; then
  exit 0
fi
printf '%s\n' "$info" | grep -qx 'cluster_state:ok' || exit 1
role=$(redis-cli -p 6379 role | head -n 1 | tr -d '\r')
if [ "$role" = slave ]; then
  redis-cli -p 6379 info replication | tr -d '\r' | grep -qx 'master_link_status:up' || exit 1
fi
exit 0
