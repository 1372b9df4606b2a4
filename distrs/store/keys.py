"""Every Redis key, channel and TTL the store uses, built in one place.

All keys share one namespace ``{ns}`` wrapped in a Redis Cluster hash tag, so every key of one
deployment hashes to the same slot: the Lua scripts touch keys they discover at run time (the
request a queue entry points to, the batch a request belongs to), which Redis Cluster only allows
within one slot. The Lua scripts never build key names themselves: Python builds each key here and
passes it in, or stores it in a record the script follows (a queue member carries its request
key, a request hash its batch keys, a lease hash its request and queue keys).

Layout (``T`` = task, ``B`` = batch id, ``R`` = request id, ``S`` = stage, ``L`` = lease id)::

    {ns}:seq                  string   global arrival counter (FCFS order and submission order)
    {ns}:owner:T              string   tenant owning task T (tenant isolation)
    {ns}:batch:T:B            hash     BatchInfo fields + keys of the batch's companions
    {ns}:bmembers:T:B         list     request keys in submission order
    {ns}:bresults:T:B         hash     zero-padded seq -> Result JSON (results in submission order)
    {ns}:bqueued:T:B          zset     "S\\n<request key>" -> stage enqueue time (planner input)
    {ns}:bprofile:T:B         hash     zero-padded seq -> request profile JSON {r, s, status}
    {ns}:req:T:R              hash     RequestRecord fields (payload/artifacts/stages as JSON)
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
"""

from __future__ import annotations

DEFAULT_NAMESPACE = "distrs"

# Width of the zero-padded arrival sequence that prefixes queue members and result fields, so that
# lexicographic order (Redis' tie-break for equal scores) equals numeric order.
SEQ_WIDTH = 20

# Approximate length the event stream is trimmed to (XADD MAXLEN ~).
EVENTS_MAXLEN = 100_000


def _part(value: str) -> str:
    """Escape ``%`` and ``:`` inside a key component so ``a:b``+``c`` never equals ``a``+``b:c``."""
    return value.replace("%", "%25").replace(":", "%3A")


class Keys:
    """Key builders for one namespace."""

    def __init__(self, namespace: str = DEFAULT_NAMESPACE) -> None:
        if not namespace or any(c in namespace for c in "{}\n"):
            raise ValueError(f"invalid Redis namespace {namespace!r}")
        self.ns = namespace
        self._p = "{" + namespace + "}"

    # global
    def seq(self) -> str:
        return f"{self._p}:seq"

    def stages(self) -> str:
        return f"{self._p}:stages"

    def leases(self) -> str:
        return f"{self._p}:leases"

    def active(self) -> str:
        return f"{self._p}:active"

    def events(self) -> str:
        return f"{self._p}:events"

    def spans(self) -> str:
        return f"{self._p}:spans"

    def work_channel(self) -> str:
        return f"{self._p}:chan:work"

    def result_channel(self) -> str:
        return f"{self._p}:chan:result"

    # per task
    def owner(self, task: str) -> str:
        return f"{self._p}:owner:{_part(task)}"

    def history(self, task: str) -> str:
        return f"{self._p}:history:{_part(task)}"

    def span(self, task: str) -> str:
        return f"{self._p}:span:{_part(task)}"

    # per batch
    def batch(self, task: str, batch_id: str) -> str:
        return f"{self._p}:batch:{_part(task)}:{_part(batch_id)}"

    def batch_members(self, task: str, batch_id: str) -> str:
        return f"{self._p}:bmembers:{_part(task)}:{_part(batch_id)}"

    def batch_results(self, task: str, batch_id: str) -> str:
        return f"{self._p}:bresults:{_part(task)}:{_part(batch_id)}"

    def batch_queued(self, task: str, batch_id: str) -> str:
        return f"{self._p}:bqueued:{_part(task)}:{_part(batch_id)}"

    def batch_profile(self, task: str, batch_id: str) -> str:
        return f"{self._p}:bprofile:{_part(task)}:{_part(batch_id)}"

    # per request / stage / lease
    def request(self, task: str, request_id: str) -> str:
        return f"{self._p}:req:{_part(task)}:{_part(request_id)}"

    def queue(self, stage: str) -> str:
        return f"{self._p}:queue:{_part(stage)}"

    def lease(self, lease_id: str) -> str:
        return f"{self._p}:lease:{_part(lease_id)}"

    def all_patterns(self) -> list[str]:
        """SCAN patterns covering every key of the namespace (ops tooling and tests)."""
        return [f"{self._p}:*"]


def seq_field(seq: int) -> str:
    """The zero-padded arrival sequence used as queue-member prefix and result field."""
    return str(seq).zfill(SEQ_WIDTH)
