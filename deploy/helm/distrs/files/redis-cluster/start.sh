#!/bin/sh
# Start one node of the release's Redis Cluster: `sh start.sh <redis-server arguments>`.
#
# A rescheduled pod comes back with a new IP, and the cluster bus talks IPs. One moved node is
# found again by itself (it tells its peers its new address when it reaches them), but if every
# pod moved (a whole node pool replaced) no node could reach any other. So before starting, each
# peer's address in nodes.conf is refreshed from the hostname it announces (its stable pod DNS
# name); a peer whose name does not resolve yet keeps its last address and is learnt later.
set -eu
conf=/data/nodes.conf
if [ -s "$conf" ]; then
  awk '
    NF >= 8 && index($2, ",") {
      n = split($2, part, ",")
      host = part[2]
      at = match(part[1], /:[0-9]+@[0-9]+$/)
      if (host ~ /^[A-Za-z0-9.-]+$/ && at > 0) {
        ip = ""
        cmd = "getent hosts " host
        if ((cmd | getline line) > 0) { split(line, r, " "); ip = r[1] }
        close(cmd)
        if (ip != "") {
          addr = ip substr(part[1], at)
          for (i = 2; i <= n; i++) addr = addr "," part[i]
          $2 = addr
        }
      }
    }
    { print }
  ' "$conf" > "$conf.refreshed"
  mv "$conf.refreshed" "$conf"
fi
exec redis-server "$@"
