"""Where the store's keys live and how its scripts reach them: the one place the Redis modes
differ (``DISTRS_REDIS_MODE``).

The store's parts (batches, leases, results, usage) are written once, against a ``Topology``:
they build keys with ``topology.keys``, run scripts with ``topology.run`` and read with
``topology.call``, and ask it the few questions whose answer depends on the mode (which queues a
lease reads, which slots the expiry sweep visits, what follows a transition that queued work).
``open_topology`` picks one at construction; nothing else in the store looks at the mode.

* **standalone** (``Topology``, ``standalone.py``): one primary, every key under ``{ns}``, one queue per stage.
  Script calls go on a pipelined connection of their own (``redis/script_connection.py``),
  those of one event-loop tick together (``redis/coalesce.py``).
* **sentinel** (``SentinelTopology``, ``standalone.py``): the standalone layout and scripts on
  the primary the Sentinels name (``redis/sentinel.py``); acknowledged transitions wait for a replica (``redis/replicas.py``:
  the WAIT rides at the end of the tick's pipeline), and redis-py's connections follow a primary
  that moves.
* **cluster** (``ClusterTopology``, ``cluster.py``): keys grouped per task, slot and tenant
  (``keys.py ClusterKeys``), one queue per task and stage with a ready index (``ready.py``),
  scripts that hand back what belongs to other slots.

Every failure of a call becomes a StoreError (``call``, ``records.translate``): the proxy answers
503 for what Redis cannot serve now and the script's own code for what it refused.
"""

from __future__ import annotations

from distrs.config import StoreSettings
from distrs.store.keys import EVENTS_MAXLEN, ClusterKeys, Keys
from distrs.store.redis.client import connect, connect_cluster
from distrs.store.redis.sentinel import connect_sentinel
from distrs.store.redis.topology.cluster import ClusterTopology
from distrs.store.redis.topology.standalone import SentinelTopology, TakeFrom, Topology


def open_topology(
    url: str, settings: StoreSettings, namespace: str, events_maxlen: int = EVENTS_MAXLEN
) -> Topology:
    """The topology of ``settings.redis_mode`` over a new client for ``url`` (``redis://``,
    ``rediss://`` or ``unix://``; in cluster mode any seed node; in sentinel mode
    ``redis+sentinel://``, store/sentinel_url.py). Connections open lazily, on first use."""
    if settings.redis_mode == "cluster":
        return ClusterTopology(
            connect_cluster(url, settings), settings, ClusterKeys(namespace), events_maxlen
        )
    if settings.redis_mode == "sentinel":
        return SentinelTopology(connect_sentinel(url, settings), settings, Keys(namespace), events_maxlen)
    return Topology(connect(url, settings), settings, Keys(namespace), events_maxlen)


__all__ = ["ClusterTopology", "SentinelTopology", "TakeFrom", "Topology", "open_topology"]
