"""How many session workers to run: pure, the clock passed in.

A session pins capacity: it lives in one worker's memory until it ends, so the pool must hold
every open session (``per_worker`` each) plus room for those about to open (``headroom``, and
every create already waiting). Its calls also need threads: a trainer step drives all of its
trajectories' sessions at once and waits for the slowest (the batch constraint EBF keeps for
rewards), so the pool keeps enough exec slots for the most sessions that were busy at once over
the last ``window_s`` (``exec_slots`` per worker): no step's exec waits for another's slot.

Scale-down is held back: the size is the largest wanted over ``window_s``, so a pool does not
shrink between two steps of a trainer only to grow again at the next one, and it never goes below
the workers that hold sessions (on Kubernetes the Deployment picks which pods go: the actuator
marks those without sessions cheaper to delete). A smaller size never ends a session: the local
host drains the workers with the fewest sessions, and a drained worker keeps serving those it
holds until they end (``worker/session_host.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class PoolDemand:
    """What the store shows of the pool at one moment (``SessionStats``)."""

    now: float
    open: int
    opening: int  # creates queued or running
    busy_sessions: int  # sessions with a call queued or running
    holding: int = 0  # workers holding at least one session


@dataclass(frozen=True)
class PoolShape:
    per_worker: int  # sessions a worker holds
    exec_slots: int  # calls a worker runs at once
    headroom: float  # free room kept, as a fraction of the sessions open
    min_workers: int = 0
    max_workers: int = 8
    window_s: float = 60.0


def wanted(d: PoolDemand, shape: PoolShape) -> int:
    """Workers for this moment alone: room for every session and exec slots for the busy ones."""
    sessions = d.open + d.opening
    by_room = math.ceil((sessions + math.ceil(d.open * shape.headroom)) / shape.per_worker) if sessions else 0
    by_calls = math.ceil(d.busy_sessions / shape.exec_slots)
    return max(by_room, by_calls)


def pool_size(history: Sequence[PoolDemand], shape: PoolShape) -> int:
    """The pool's size: the most wanted over the last ``window_s`` of ``history`` (oldest first,
    the newest last), within ``[min_workers, max_workers]``, and never below the workers that
    hold sessions now (a Kubernetes scale-down picks its pods; none of those may go)."""
    if not history:
        return shape.min_workers
    now = history[-1].now
    recent = [wanted(d, shape) for d in history if now - d.now <= shape.window_s]
    size = max(shape.min_workers, min(shape.max_workers, max(recent)))
    return max(size, history[-1].holding)


def trim(history: list[PoolDemand], now: float, window_s: float) -> list[PoolDemand]:
    """``history`` without what is older than the window (what ``pool_size`` would ignore)."""
    return [d for d in history if now - d.now <= window_s]


def largest_burst(times: Sequence[float], now: float, window_s: float, burst_s: float) -> int:
    """The most of ``times`` (sorted) within any ``burst_s`` over the last ``window_s``."""
    recent = [t for t in times if now - t <= window_s]
    best, lo = 0, 0
    for hi, t in enumerate(recent):
        while t - recent[lo] > burst_s:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def spare_target(
    create_times: Sequence[float],
    now: float,
    window_s: float,
    warm_min: int,
    room: int,
    burst_s: float = 10.0,
) -> int:
    """Pre-opened spare jails a worker keeps: as many as the largest burst of creates it served
    over the last ``window_s`` (a trainer's step opens all its trajectories' sessions at once,
    and the next step will ask for as many), at least ``warm_min``, at most ``room`` (its free
    capacity)."""
    burst = largest_burst(create_times, now, window_s, burst_s)
    return max(0, min(room, max(warm_min, burst)))
