"""Keep the cyclic garbage collector's pauses short in a long-running proxy.

Why: CPython's collector runs a full (generation-2) pass whenever the objects promoted to the
oldest generation have grown by a quarter since the last one, and a full pass walks *every*
tracked object: the imported modules, and with the memory store every request record and result
it keeps (about 12 tracked objects per finished request). Measured with
``benchmarks/proxy_load.py`` the proxy stopped its event loop for 40 ms at start-up size and for
200 ms once 44,000 requests had passed (390,000 live objects), which was the proxy's whole p99
added latency; the pause grows without bound with the store.

What: ``GcPolicy.install`` freezes what is alive after start-up (``gc.freeze``, O(1): imported
code and settings are never garbage), and after every generation-1 or full pass it freezes the
survivors again. Everything that survived such a pass was reachable at that moment, so a full
pass only walks the objects promoted since the last generation-1 pass (a few, instead of all
those promoted since the last full pass: with the memory store keeping every record, those were
40-90 ms of pause every ten seconds or so at a few hundred requests per second, measured with
the batches-of-one run of ``benchmarks/proxy_load.py``, and the p99 of that run). Freezing has
one cost: an object frozen while alive that later becomes part of an unreachable reference cycle
is not freed (objects freed by reference counting, which is nearly all of them, still are). So at most every ``sweep_interval_s`` the policy
unfreezes everything and the next full pass walks the whole heap once (``sweep_due``), which
frees such cycles; that one pause is as long as a full pass without the policy, but it comes once
per interval instead of every time the heap grows by a quarter.

Nothing here changes what is collected apart from that delay, and nothing reads a clock for a
decision except through the ``clock`` it is given. ``uninstall`` (the app's shutdown) undoes it.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

# A full pass over the whole heap (frozen objects included) at most this often.
SWEEP_INTERVAL_S = 1800.0
# Generation-0 passes per generation-1 pass (CPython's default: 10). A generation-1 pass walks
# what the young passes since the previous one kept (with the memory store: nearly all they saw),
# then the policy freezes it; fewer young passes in between make each such pause shorter, for
# the same work in all.
YOUNG_PASSES_PER_GEN1 = 2


def sweep_due(now: float, last_sweep_at: float, interval_s: float) -> bool:
    """Whether the next full pass should walk the whole heap (frozen objects too)."""
    return now - last_sweep_at >= interval_s


class GcPolicy:
    """Freeze start-up state and the survivors of every full pass; sweep everything at most
    every ``sweep_interval_s`` (module docstring)."""

    def __init__(
        self, sweep_interval_s: float = SWEEP_INTERVAL_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.sweep_interval_s = sweep_interval_s
        self.clock = clock
        self.last_sweep_at = 0.0
        self.installed = False
        self._thresholds = gc.get_threshold()
        self.sweep_pending = False  # unfrozen: the next full pass walks the whole heap

    def install(self) -> None:
        """Freeze what is alive and keep freezing after every full pass (both O(1))."""
        if self.installed:
            return
        gc.freeze()
        self._thresholds = gc.get_threshold()
        gc.set_threshold(self._thresholds[0], YOUNG_PASSES_PER_GEN1, self._thresholds[2])
        self.last_sweep_at = self.clock()
        gc.callbacks.append(self._on_gc)
        self.installed = True
        log.debug("gc: %d objects frozen after start-up", gc.get_freeze_count())

    def uninstall(self) -> None:
        """Stop freezing and hand every frozen object back to the collector."""
        if not self.installed:
            return
        self.installed = False
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        gc.set_threshold(*self._thresholds)
        gc.unfreeze()

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        generation = info.get("generation")
        if phase != "stop" or generation not in (1, 2):
            return
        if generation == 2:
            if self.sweep_pending:  # that was the sweep: freezing goes on
                self.sweep_pending = False
            elif sweep_due(now := self.clock(), self.last_sweep_at, self.sweep_interval_s):
                # the next full pass walks everything and frees cycles among formerly frozen objects
                self.last_sweep_at = now
                self.sweep_pending = True
                gc.unfreeze()
                return
        elif self.sweep_pending:  # keep the heap unfrozen until the sweep has walked it
            return
        # every survivor of this pass is reachable now: later passes need not walk it again
        gc.freeze()
