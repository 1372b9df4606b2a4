"""The session pool's planner over the memory session store and a fake of the actuator."""

from __future__ import annotations

from distrs.actuators.base import StageReplicas
from distrs.config import SessionSettings
from distrs.core.sessions import EndReason, Language, OpKind, SessionOp, SessionRecord, WorkerView
from distrs.planner.sessions import POOL, SessionPoolPlanner
from distrs.store.sessions.base import OpDone
from distrs.store.sessions.memory import MemorySessionStore


class FakeActuator:
    def __init__(self) -> None:
        self.asked: list[tuple[str, int]] = []

    async def set_replicas(self, stage: str, n: int) -> None:
        self.asked.append((stage, n))

    async def observe(self) -> dict[str, StageReplicas]:
        return {}

    async def close(self) -> None:
        return None


class Clock:
    t = 1000.0

    def __call__(self) -> float:
        return self.t


async def test_the_pool_follows_open_sessions_and_holds_its_size_over_the_window() -> None:
    store, act, clock = MemorySessionStore(), FakeActuator(), Clock()
    settings = SessionSettings(per_worker=2, exec_slots_per_worker=4, headroom=0.0, max_workers=5)
    planner = SessionPoolPlanner(store, act, settings, clock=clock, window_s=30.0)
    assert await planner.decide() == 0  # nothing open: no worker
    for n in range(3):
        sid = f"s{n}"
        rec = SessionRecord(
            session_id=sid,
            tenant="a",
            task="a/t",
            language=Language.PYTHON,
            created_at=clock.t,
            last_used_at=clock.t,
            idle_timeout_s=60,
            max_lifetime_s=600,
        )
        await store.create(
            rec,
            SessionOp(op_id=f"{sid}.c", session_id=sid, kind=OpKind.CREATE, created_at=clock.t),
            clock.t,
            None,
        )
    assert await planner.decide() == 2  # three sessions opening, two per worker
    view = WorkerView(worker_id="w", holder="h", capacity=3, seen_at=clock.t)
    taken = await store.poll(view, clock.t, 10, 10.0)
    await store.complete("h", [OpDone(op_id=o.op_id, result={}) for o in taken], clock.t)
    for sid in ("s0", "s1", "s2"):
        await store.end(sid, EndReason.DELETED, clock.t)
    clock.t += 10
    assert await planner.decide() == 2  # held: the burst is 10 s old
    clock.t += 31
    assert await planner.decide() == 0
    assert act.asked[-1] == (POOL, 0) and all(stage == POOL for stage, _ in act.asked)


async def test_a_kubernetes_scale_down_spares_the_pods_holding_sessions() -> None:
    from distrs.actuators.kubernetes import is_busy
    from distrs.planner.process import busy_from
    from distrs.store.memory import MemoryStore

    store, clock = MemorySessionStore(), Clock()
    rec = SessionRecord(
        session_id="s1",
        tenant="a",
        task="a/t",
        language=Language.PYTHON,
        created_at=clock.t,
        last_used_at=clock.t,
        idle_timeout_s=60,
        max_lifetime_s=600,
    )
    await store.create(
        rec, SessionOp(op_id="s1.c", session_id="s1", kind=OpKind.CREATE, created_at=clock.t), clock.t, None
    )
    worker = "pod-a-1-ab12cd-s1"  # the session worker's id: its pod's name first
    [op] = await store.poll(
        WorkerView(worker_id=worker, holder="h", capacity=3, seen_at=clock.t), clock.t, 5, 10.0
    )
    await store.complete("h", [OpDone(op_id=op.op_id, result={})], clock.t)
    busy = await busy_from(MemoryStore(), clock, store)(POOL)
    assert busy == {worker}
    assert is_busy("pod-a", busy) and not is_busy("pod-b", busy)
