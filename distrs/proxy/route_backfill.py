"""Completions of requests that carry no stored route: those submitted by an earlier release.

**Why it exists.** The store keeps a request's whole route, decided at submit, and a completion
with outcome ``next`` moves the request on along it in the same atomic step (store/base.py). The
release before that kept only the request's first stage, and its proxy worked out the next stage
at each completion from the request's reward type and payload. A multi-stage request submitted
by that release and still queued or running across an upgrade that keeps Redis' data has no
route: the store refuses its ``next`` (``no_next_stage``, as at the last stage of a route), the
worker gives up on the lease, and after ``max_attempts`` leases the request ends
``internal_error``: work lost.

**What it does.** Only when a ``next`` was refused ``no_next_stage`` (never on a completion that
lands, so the hot path reads and writes nothing more): it reads the lease (its request, stage,
reward type and payload), computes the route as submission does (``rewards/routing.py``), and,
when that route goes on after the lease's stage, asks the store to keep it where the request
has none stored (``QueueStore.store_route``: one atomic step that never replaces a stored
route); then it sends that completion again, once. A request truly at its last stage stays
refused: its computed route ends there too, so nothing is written; and where the pipelines
changed since it was submitted, the route it has is kept (``store_route`` changes nothing, so
nothing is sent again). Single completions and bundles both come through here
(``routes/worker.py``); a bundle's items that go again go in one call.

**When it can be removed.** Once no deployment can still hold an unfinished request of a release
that stored no route: every deployment has upgraded to a release with this module, and the
batches in flight at that upgrade have finished (a finished request is never completed again).
Then delete this module, its two calls in ``routes/worker.py``, ``QueueStore.store_route`` with
its two implementations, ``STORE_ROUTE`` in ``store/redis/scripts.py`` and
``lua/store_route.lua``, their tests, and docs/store.md's section "Upgrading from a release
without stored routes".
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from distrs.core.model import Completion
from distrs.core.stages import PipelineTable
from distrs.rewards.routing import route
from distrs.store.base import CompleteOutcome, QueueStore
from distrs.store.errors import NoNextStage, StoreError

log = logging.getLogger(__name__)


def goes_on(stages: Sequence[str], stage: str) -> bool:
    """Whether ``stages`` has a stage after ``stage`` (False when ``stage`` is not on it)."""
    return stage in stages and stages.index(stage) + 1 < len(stages)


async def store_missing_route(store: QueueStore, table: PipelineTable, lease_id: str) -> bool:
    """After a ``next`` of ``lease_id`` was refused ``no_next_stage``: keep the route of its
    request, computed from its reward type and payload, where the request has none stored. True
    when stored (the completion may go again); False when the route ends at the lease's stage,
    the request keeps a route of its own, or the lease is gone."""
    lease = await store.get_lease(lease_id)
    if lease is None:
        return False
    try:
        stages = route(table, lease.reward_type, lease.payload)
    except (KeyError, ValueError) as exc:  # a reward type no longer served, a hook's refusal
        log.warning("no route for request %s of task %s: %s", lease.request_id, lease.task, exc)
        return False
    if not goes_on(stages, lease.stage):
        return False
    stored = await store.store_route(lease.task, lease.request_id, stages)
    if stored:
        log.info(
            "request %s of task %s had no stored route: stored %s",
            lease.request_id, lease.task, stages,
        )  # fmt: skip
    return stored


async def complete_again(
    store: QueueStore,
    table: PipelineTable,
    item: Completion,
    holder: str,
    clock: Callable[[], float],
    refused: NoNextStage,
) -> CompleteOutcome:
    """A single completion refused ``refused``: sent again once its request's route is stored,
    else ``refused`` raised as it came. The second answer is final, refused or not."""
    if item.outcome != "next" or not await store_missing_route(store, table, item.lease_id):
        raise refused
    return await store.complete(item, holder, clock())


async def complete_many_again(
    store: QueueStore,
    table: PipelineTable,
    items: Sequence[Completion],
    outs: Sequence[CompleteOutcome | StoreError],
    holder: str,
    clock: Callable[[], float],
) -> list[CompleteOutcome | StoreError]:
    """A bundle's answers ``outs`` (to ``items``, in order) with each item refused
    ``no_next_stage`` whose request's route was stored sent again, all of them in one call, once;
    every other answer as it came. The others have landed, so a store failure on the way (a lost
    connection) answers for the items it concerns, as the bundle answers per lease."""
    refused = [i for i, out in enumerate(outs) if isinstance(out, NoNextStage) and items[i].outcome == "next"]
    stored = await asyncio.gather(
        *(store_missing_route(store, table, items[i].lease_id) for i in refused), return_exceptions=True
    )
    answers = list(outs)
    again: list[int] = []
    for i, got in zip(refused, stored, strict=True):
        if isinstance(got, StoreError):
            answers[i] = got
        elif isinstance(got, BaseException):
            raise got
        elif got:
            again.append(i)
    if not again:
        return answers
    try:
        retried = await store.complete_many([items[i] for i in again], holder, clock())
    except StoreError as exc:
        retried = [exc] * len(again)
    for i, out in zip(again, retried, strict=True):
        answers[i] = out
    return answers
