"""The proxy's collector policy: start-up state and the survivors of generation-1 and full passes are frozen, garbage is
still collected, a periodic sweep frees cycles among formerly frozen objects, and uninstall
hands everything back."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from distrs.proxy.gc_policy import GcPolicy, sweep_due


@dataclass
class Clock:
    t: float = 100.0

    def __call__(self) -> float:
        return self.t


class Node:
    """A small object that can sit in a reference cycle and be watched through a weakref."""

    def __init__(self) -> None:
        self.other: Node | None = None


def cycle() -> tuple[Node, weakref.ref[Node]]:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return a, weakref.ref(a)


@pytest.fixture
def clean() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


@pytest.mark.parametrize(
    ("now", "last", "interval", "due"),
    [
        (100.0, 100.0, 60.0, False),
        (159.9, 100.0, 60.0, False),
        (160.0, 100.0, 60.0, True),
        (1e6, 100.0, 60.0, True),
        (100.0, 100.0, 0.0, True),
    ],
)
def test_sweep_due(now: float, last: float, interval: float, due: bool) -> None:
    assert sweep_due(now, last, interval) is due


def test_install_freezes_live_objects_and_uninstall_hands_them_back(clean: None) -> None:
    policy = GcPolicy(clock=Clock())
    policy.install()
    try:
        assert gc.get_freeze_count() > 0
        assert policy._on_gc in gc.callbacks
        policy.install()  # idempotent: one callback
        assert gc.callbacks.count(policy._on_gc) == 1
    finally:
        policy.uninstall()
    assert gc.get_freeze_count() == 0
    assert policy._on_gc not in gc.callbacks


def test_full_pass_survivors_are_frozen_and_new_garbage_is_still_collected(clean: None) -> None:
    policy = GcPolicy(sweep_interval_s=3600.0, clock=Clock())
    policy.install()
    try:
        survivor = [Node() for _ in range(1000)]  # alive across the next full pass
        gc.collect()
        frozen = gc.get_freeze_count()
        assert frozen >= len(survivor)
        # a cycle made after the pass and dropped is garbage the next pass collects
        a, ref = cycle()
        del a
        gc.collect()
        assert ref() is None
        assert survivor[0].other is None
    finally:
        policy.uninstall()


def test_cycle_frozen_while_alive_is_freed_by_the_sweep(clean: None) -> None:
    clock = Clock()
    policy = GcPolicy(sweep_interval_s=60.0, clock=clock)
    policy.install()
    try:
        a, ref = cycle()
        gc.collect()  # a full pass: the live cycle is frozen with the other survivors
        del a
        gc.collect()  # no sweep due: the frozen cycle is not walked
        assert ref() is not None
        clock.t += 60.0
        gc.collect()  # sweep due: everything is handed back after this pass
        assert gc.get_freeze_count() == 0
        gc.collect()  # this full pass walks the whole heap
        assert ref() is None
        assert gc.get_freeze_count() > 0  # and freezing goes on after it
    finally:
        policy.uninstall()


def test_generation_1_survivors_are_frozen_and_a_sweep_waits_for_its_full_pass(clean: None) -> None:
    clock = Clock()
    policy = GcPolicy(sweep_interval_s=60.0, clock=clock)
    policy.install()
    try:
        before = gc.get_freeze_count()
        survivor = [Node() for _ in range(1000)]
        gc.collect(1)
        assert gc.get_freeze_count() >= before + len(survivor)
        a, ref = cycle()
        gc.collect(1)  # frozen while alive
        del a
        clock.t += 60.0
        gc.collect()  # sweep due: unfrozen after this pass
        assert gc.get_freeze_count() == 0
        gc.collect(1)  # a generation-1 pass before the sweep must not freeze again
        assert gc.get_freeze_count() == 0
        gc.collect()  # the sweep walks everything
        assert ref() is None
        gc.collect(1)
        assert gc.get_freeze_count() > 0
    finally:
        policy.uninstall()


async def test_the_app_runs_under_the_policy_while_it_serves(clean: None) -> None:
    from distrs.config import ProxySettings
    from distrs.proxy.app import create_app

    before = list(gc.callbacks)
    app = create_app(ProxySettings(insecure=True))
    async with app.router.lifespan_context(app):
        assert gc.get_freeze_count() > 0
        added = [cb for cb in gc.callbacks if cb not in before]
        assert len(added) == 1
        survivor = [Node() for _ in range(100)]
        gc.collect()
        assert gc.get_freeze_count() >= len(survivor)
    assert gc.get_freeze_count() == 0
    assert gc.callbacks == before
