"""Every Redis key, channel and TTL the store uses, built in one place.

All keys share one namespace ``{ns}`` wrapped in a Redis Cluster hash tag, so every key of one
deployment hashes to the same slot: the Lua scripts touch keys they discover at run time (the
request a queue entry points to, the batch a request belongs to), which Redis Cluster only allows
within one slot. The Lua scripts never build key names themselves: Python builds each key here and
passes it in, or stores it in a record the script follows (a queue member carries its request
key, a request hash its batch keys and the queue key of every stage on its route, a lease hash
its request and queue keys). One exception:
standalone, the scripts append a tenant (escaped as ``_part`` does) to the usage key prefixes
Python passes (``usage_prefixes``), since a completion learns its request's tenant only there.

Layout (``T`` = task, ``B`` = batch id, ``R`` = request id, ``S`` = stage, ``L`` = lease id)::

    {ns}:seq                  string   global arrival counter (FCFS order and submission order)
    {ns}:owner:T              string   tenant owning task T (tenant isolation)
    {ns}:batch:T:B            hash     BatchInfo fields + keys of the batch's companions
    {ns}:bmembers:T:B         list     request keys in submission order
    {ns}:bresults:T:B         hash     zero-padded seq -> Result JSON (results in submission order)
    {ns}:bqueued:T:B          zset     "S\\n<request key>" -> stage enqueue time (planner input)
    {ns}:bprofile:T:B         hash     zero-padded seq -> request profile JSON {r, s, status}
    {ns}:req:T:R              hash     RequestRecord fields (payload/artifacts/stages as JSON;
                                       ``route``: [[stage, queue key], ...] of a route of
                                       more than one stage)
    {ns}:queue:S              zset     score = batch estimated completion T (EBF) or 0 (FCFS),
                                       member = zero-padded seq + request key
    {ns}:stages               set      stages that ever had work (queue depth in snapshots)
    {ns}:lease:L              hash     live lease; deleted when it completes or is requeued
    {ns}:leases               zset     lease key -> deadline (expiry scan)
    {ns}:active               zset     batch key -> registration time (planner snapshot)
    {ns}:history:T            list     last K BatchProfile JSON of task T, oldest first
    {ns}:span:T               string   earliest-completion span of T's latest finished batch
    {ns}:spans                list     recent finished batches of all tasks, newest first:
                                       JSON {rt, at, span} (the prior of tasks with no history)
    {ns}:events               stream   planner events (XADD ... MAXLEN ~)
    {ns}:chan:work            channel  PUBLISH "S\\ncount" when stage queue S gains count requests
    {ns}:chan:result          channel  PUBLISH batch key when a result of that batch lands
    {ns}:uqueued:N            hash     tenant N's usage: batch key -> requests not yet finished
    {ns}:ubytes:N             hash     tenant N's usage: batch key -> JSON bytes of its results
    {ns}:uexpiry:N            zset     tenant N's batches with results -> when they expire
                                       (+inf until the batch completes); see store/redis/usage.py
    {ns}:utotals:N            hash     tenant N's totals of the two above: queued, bytes

Cluster mode (``DISTRS_REDIS_MODE=cluster``, ``ClusterKeys(ns)``). One hash tag for the
whole deployment would put every key on one shard, so keys are grouped by what the scripts touch
together:

* **per task** ``{ns:t:T}`` (``T`` verbatim, the store's ``TENANT/TASK`` name; only ``%``,
  ``{`` and ``}`` are escaped): owner, history, span, the task's batches with their companions,
  its requests, and the task's own queue per stage ``{ns:t:T}:queue:S``. ``CLUSTER KEYSLOT
  "{ns:t:alice/gsm8k}"`` names the slot, ``CLUSTER NODES`` its shard.
* **per slot** ``{ns:s:i}``, a tag that hashes to the same slot as the task's tag (the smallest
  such ``i``, ``slot_tags``): leases ``{..}:lease:L`` with the lease-expiry index
  ``{..}:leases``, the active batches ``{..}:active`` and the stages that had work
  ``{..}:stages``. A lease id starts with its slot (4 hex digits), so a heartbeat or completion,
  which names only the lease, finds its keys; every task of one slot shares these, so a
  completion or requeue script touches one slot whatever tasks it meets.
* **per tenant** ``{ns:u:N}``: the tenant's usage counters (``uqueued``, ``ubytes``,
  ``uexpiry``, ``utotals``): the script of a transition hands back what it changed in them and
  the store writes that right after, so they never have to share a slot with a task.
  (Standalone, they share ``{ns}`` and the scripts move them with the transition;
  ``usage_prefixes``.)
* **global** ``{ns}``: ``seq`` (taken with INCRBY before a submit script and passed in, so queue
  members still carry one deployment-wide arrival order), ``events``, ``spans``, the task
  registry ``tasks`` (task -> last registration time: which slots the reaper and the snapshot
  visit) and the per-stage ready index ``ready:S`` (task -> generation from ``readygen``: the
  tasks whose stage-S queue may hold work, redis/topology/ready.py). No script of a transition touches a
  global key in cluster mode: the scripts hand their events and finished spans back, and the
  store appends them (and marks the ready index) right after (a proxy that dies in between
  loses planner hints, never work; a lost mark is repaired by the expiry sweep).
* **fence** ``{tag}:fence``, never written: the scripts read it with their first key to stop
  before any write while their slot is being migrated (``lua/cluster.lua``).

A lease reads the heads of its stage's queues of the tasks marked ready (``ZRANGE q 0 0`` per
task, pipelined per shard) and takes from the earliest by (T, arrival sequence): the same order
one queue would give (docs/store.md, "Cluster").
"""

from __future__ import annotations

from functools import lru_cache
from itertools import count

from redis.crc import key_slot

DEFAULT_NAMESPACE = "distrs"

# Width of the zero-padded arrival sequence that prefixes queue members and result fields, so that
# lexicographic order (Redis' tie-break for equal scores) equals numeric order.
SEQ_WIDTH = 20

# Approximate length the event stream is trimmed to (XADD MAXLEN ~).
EVENTS_MAXLEN = 100_000


def _tag_part(value: str) -> str:
    """Escape only what would end or confuse a hash tag, keeping task names readable."""
    return value.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


@lru_cache(maxsize=8)
def slot_tags(namespace: str) -> tuple[str, ...]:
    """For every slot N, a hash tag ``{ns:s:i}`` that hashes to N: the smallest such ``i``.
    Built once per namespace and process (about 170k CRC16 of short strings, well under a second;
    the cluster store builds it when it starts)."""
    tags: list[str | None] = [None] * 16384
    missing = 16384
    for i in count():
        tag = f"{namespace}:s:{i}"
        slot = key_slot(tag.encode())
        if tags[slot] is None:
            tags[slot] = "{" + tag + "}"
            missing -= 1
            if not missing:
                return tuple(t or "" for t in tags)
    raise AssertionError("unreachable")


def _part(value: str) -> str:
    """Escape ``%`` and ``:`` inside a key component so ``a:b``+``c`` never equals ``a``+``b:c``.
    ``lua/lib.lua`` ``usage_tenant`` escapes a tenant name the same way."""
    return value.replace("%", "%25").replace(":", "%3A")


class Keys:
    """Key builders for one namespace, standalone layout: every key under ``{ns}`` (the module
    docstring). The ``slot`` and ``task`` parameters name where a key lives in cluster mode
    (``ClusterKeys``); here every key shares one slot and they change nothing."""

    cluster = False

    def __init__(self, namespace: str = DEFAULT_NAMESPACE) -> None:
        if not namespace or any(c in namespace for c in "{}\n"):
            raise ValueError(f"invalid Redis namespace {namespace!r}")
        self.ns = namespace
        self._p = "{" + namespace + "}"

    # where keys live
    def task_tag(self, task: str) -> str:
        """The prefix of a task's own keys."""
        return self._p

    def slot_of(self, task: str) -> int | None:
        """The cluster slot of a task's keys (None: one slot for everything)."""
        return None

    def lease_slot(self, lease_id: str) -> int | None:
        """The slot a lease id names (None: one slot for everything)."""
        return None

    def _slot_p(self, slot: int | None) -> str:
        return self._p

    # global
    def seq(self) -> str:
        return f"{self._p}:seq"

    def stages(self, slot: int | None = None) -> str:
        return f"{self._slot_p(slot)}:stages"

    def leases(self, slot: int | None = None) -> str:
        return f"{self._slot_p(slot)}:leases"

    def active(self, slot: int | None = None) -> str:
        return f"{self._slot_p(slot)}:active"

    def events(self) -> str:
        return f"{self._p}:events"

    def spans(self) -> str:
        return f"{self._p}:spans"

    def work_channel(self) -> str:
        return f"{self._p}:chan:work"

    def result_channel(self) -> str:
        return f"{self._p}:chan:result"

    # the global keys as a script of ``slot`` names them: the keys themselves here
    def script_seq(self, slot: int | None) -> str:
        return self.seq()

    def script_events(self, slot: int | None) -> str:
        return self.events()

    def script_spans(self, slot: int | None) -> str:
        return self.spans()

    # per tenant (usage accounting, store/redis/usage.py)
    def _u(self, kind: str, tenant: str) -> str:
        return f"{self._p}:{kind}:{_part(tenant)}"

    def usage_queued(self, tenant: str) -> str:
        return self._u("uqueued", tenant)

    def usage_bytes(self, tenant: str) -> str:
        return self._u("ubytes", tenant)

    def usage_expiry(self, tenant: str) -> str:
        return self._u("uexpiry", tenant)

    def usage_totals(self, tenant: str) -> str:
        return self._u("utotals", tenant)

    def usage_prefixes(self) -> tuple[str, str, str, str]:
        """The four usage keys (queued, bytes, expiry, totals) less their tenant part, for the
        scripts that move the counters with a transition: they append the tenant escaped as
        ``_part`` does (``lua/lib.lua`` ``usage_tenant``)."""
        return (self.usage_queued(""), self.usage_bytes(""), self.usage_expiry(""), self.usage_totals(""))

    # per task
    def _t(self, kind: str, task: str, *rest: str) -> str:
        return ":".join((self._p, kind, _part(task), *map(_part, rest)))

    def owner(self, task: str) -> str:
        return self._t("owner", task)

    def history(self, task: str) -> str:
        return self._t("history", task)

    def span(self, task: str) -> str:
        return self._t("span", task)

    # per batch
    def batch(self, task: str, batch_id: str) -> str:
        return self._t("batch", task, batch_id)

    def batch_members(self, task: str, batch_id: str) -> str:
        return self._t("bmembers", task, batch_id)

    def batch_results(self, task: str, batch_id: str) -> str:
        return self._t("bresults", task, batch_id)

    def batch_queued(self, task: str, batch_id: str) -> str:
        return self._t("bqueued", task, batch_id)

    def batch_profile(self, task: str, batch_id: str) -> str:
        return self._t("bprofile", task, batch_id)

    # per request / stage / lease
    def request(self, task: str, request_id: str) -> str:
        return self._t("req", task, request_id)

    def queue(self, stage: str, task: str | None = None) -> str:
        """The stage queue: one per stage here, one per task and stage in a cluster."""
        return f"{self._p}:queue:{_part(stage)}"

    def lease(self, lease_id: str) -> str:
        return f"{self._slot_p(self.lease_slot(lease_id))}:lease:{_part(lease_id)}"

    def all_patterns(self) -> list[str]:
        """SCAN patterns covering every key of the namespace (ops tooling and tests)."""
        return [f"{self._p}:*"]


class ClusterKeys(Keys):
    """The cluster layout (``DISTRS_REDIS_MODE=cluster``): keys grouped per task, per slot, per
    tenant and global (the module docstring)."""

    cluster = True

    def task_tag(self, task: str) -> str:
        return "{" + f"{self.ns}:t:{_tag_part(task)}" + "}"

    def slot_of(self, task: str) -> int:
        return key_slot(self.task_tag(task).encode())

    def lease_slot(self, lease_id: str) -> int:
        """The slot a lease id names in its first 4 hex digits (see the module docstring)."""
        try:
            return int(lease_id[:4], 16) % 16384
        except ValueError:
            return 0  # not one of ours: its keys do not exist, so it is an unknown lease

    def _slot_p(self, slot: int | None) -> str:
        return self._p if slot is None else slot_tags(self.ns)[slot]

    def tasks(self) -> str:
        """Registry: zset task -> last registration time."""
        return f"{self._p}:tasks"

    def ready(self, stage: str) -> str:
        """Ready index of a stage: zset task -> generation of its latest mark."""
        return f"{self._p}:ready:{_part(stage)}"

    def ready_gen(self) -> str:
        """The counter the ready marks take their generations from."""
        return f"{self._p}:readygen"

    def unused(self, slot: int | None) -> str:
        """A key in ``slot`` that no script writes: fills the script positions of the global keys
        (events, seq, spans), whose writes the scripts hand back."""
        return f"{self._slot_p(slot)}:unused"

    def script_seq(self, slot: int | None) -> str:
        return self.unused(slot)

    def script_events(self, slot: int | None) -> str:
        return self.unused(slot)

    def script_spans(self, slot: int | None) -> str:
        return self.unused(slot)

    def _u(self, kind: str, tenant: str) -> str:
        return "{" + f"{self.ns}:u:{_tag_part(tenant)}" + "}:" + kind

    def usage_prefixes(self) -> tuple[str, str, str, str]:
        """Empty: the counters live under the tenant's own tag, so the scripts hand their counts
        back and the store writes them."""
        return ("", "", "", "")

    def _t(self, kind: str, task: str, *rest: str) -> str:
        return ":".join((self.task_tag(task), kind, *map(_part, rest)))

    def queue(self, stage: str, task: str | None = None) -> str:
        if task is not None:
            return f"{self.task_tag(task)}:queue:{_part(stage)}"
        return super().queue(stage)

    def fence(self, key: str) -> str:
        """A key that is never written, in the slot of ``key`` (its hash tag).

        Every script reads it together with its first key before anything else
        (``lua/cluster.lua``): Redis answers a multi-key read that misses a key in a slot being
        migrated with an error, so a script in a moving slot stops before its first write."""
        if not key.startswith("{") or "}" not in key:
            raise ValueError(f"key {key!r} has no hash tag")
        return key[: key.index("}") + 1] + ":fence"

    def all_patterns(self) -> list[str]:
        return [f"{self._p}:*", "{" + f"{self.ns}:t:*", "{" + f"{self.ns}:s:*", "{" + f"{self.ns}:u:*"]


def seq_field(seq: int) -> str:
    """The zero-padded arrival sequence used as queue-member prefix and result field."""
    return str(seq).zfill(SEQ_WIDTH)
