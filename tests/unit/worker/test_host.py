"""The worker host: resizing threads, idle workers drained first, stopped workers revived before
new ones are made, EOF drains everything."""

from __future__ import annotations

import io
import threading
import time

from distrs.worker.host import WorkerHost


class FakeWorker:
    def __init__(self, worker_id: str, busy: bool = False) -> None:
        self.worker_id = worker_id
        self.busy = busy
        self._drain = threading.Event()
        self.release = threading.Event()
        self.revived = 0
        self.runs = 0
        self.threads: set[int] = set()

    @property
    def draining(self) -> bool:
        return self._drain.is_set()

    def request_drain(self) -> None:
        self._drain.set()

    def revive(self) -> None:
        self._drain.clear()
        self.revived += 1

    def run(self) -> None:
        self.runs += 1
        self.threads.add(threading.get_ident())
        self._drain.wait(10)
        if self.busy:  # a busy worker finishes its lease first
            self.release.wait(10)


def test_resize_up_and_down_drains_idle_workers_first() -> None:
    made: list[FakeWorker] = []

    def make(wid: str) -> FakeWorker:
        w = FakeWorker(wid, busy=len(made) == 0)  # the first worker is busy
        made.append(w)
        return w

    host = WorkerHost(make, id_prefix="h")  # type: ignore[arg-type]
    assert host.resize(3) == 3 and [w.worker_id for w in made] == ["h-1", "h-2", "h-3"]
    host.resize(1)
    assert [w.draining for w in made] == [False, True, True]  # the busy one is kept
    host.resize(0)
    assert made[0].draining and len(host.live()) == 0
    made[0].release.set()
    host.drain_all(5)


def test_serve_reads_counts_and_drains_at_eof() -> None:
    made: list[FakeWorker] = []
    host = WorkerHost(lambda wid: made.append(FakeWorker(wid)) or made[-1], id_prefix="h")  # type: ignore[arg-type, func-returns-value]
    out = io.StringIO()
    host.serve(io.StringIO("2\nnonsense\n4\n1\n"), out)
    assert out.getvalue().splitlines() == ["ready 2", "ready 4", "ready 1"]
    assert len(made) == 4 and all(w.draining for w in made)  # EOF drained everyone


def test_scale_up_revives_stopped_workers_before_making_new_ones() -> None:
    made: list[FakeWorker] = []

    def make(wid: str) -> FakeWorker:
        made.append(FakeWorker(wid))
        return made[-1]

    host = WorkerHost(make, id_prefix="h")  # type: ignore[arg-type]
    host.resize(2)
    host.resize(0)  # both drain and stop; their threads wait to be revived
    for _ in range(500):
        if len(host.stopped()) == 2:
            break
        time.sleep(0.01)
    assert len(host.stopped()) == 2
    assert host.resize(3) == 3
    # the two stopped workers serve again (their handlers, and warm children, with them); one is new
    assert [w.worker_id for w in made] == ["h-1", "h-2", "h-3"]
    assert [w.revived for w in made] == [1, 1, 0] and not any(w.draining for w in made)
    assert len(host.live()) == 3 and host.stopped() == []
    for _ in range(500):  # the revived threads run their workers again
        if [w.runs for w in made] == [2, 2, 1]:
            break
        time.sleep(0.01)
    host.drain_all(5)
    # each of the first two ran twice, in the thread that started it (and its children)
    assert [w.runs for w in made] == [2, 2, 1] and [len(w.threads) for w in made] == [1, 1, 1]


def test_scale_up_calls_off_a_drain_still_in_progress() -> None:
    made: list[FakeWorker] = []

    def make(wid: str) -> FakeWorker:
        made.append(FakeWorker(wid, busy=True))
        return made[-1]

    host = WorkerHost(make, id_prefix="h")  # type: ignore[arg-type]
    host.resize(1)
    host.resize(0)  # draining, but still finishing its lease
    assert made[0].draining and host.live() == []
    assert host.resize(1) == 1
    assert len(made) == 1 and not made[0].draining and host.live() == [made[0]]
    made[0].release.set()  # it finishes the lease and, no longer draining, serves on
    host.drain_all(5)
    assert made[0].runs >= 1 and host.stopped() == [made[0]]


def test_a_crashed_worker_stops_until_the_next_scale_up() -> None:
    made: list[FakeWorker] = []

    class Crashing(FakeWorker):
        def run(self) -> None:
            self.runs += 1
            raise RuntimeError("lease refused")

    def make(wid: str) -> FakeWorker:
        made.append(Crashing(wid))
        return made[-1]

    host = WorkerHost(make, id_prefix="h")  # type: ignore[arg-type]
    host.resize(1)
    for _ in range(500):
        if host.stopped():
            break
        time.sleep(0.01)
    assert host.stopped() == [made[0]] and made[0].runs == 1  # not retried in a loop
    host.resize(1)  # the next scale-up tries it again, as it would a new one
    for _ in range(500):
        if made[0].runs == 2 and host.stopped():
            break
        time.sleep(0.01)
    assert made[0].runs == 2 and len(made) == 1
    host.drain_all(5)


def test_host_readiness_follows_its_running_workers() -> None:
    from distrs.worker.host import WorkerHost

    class W:
        def __init__(self, ok: bool) -> None:
            self.ok = ok
            self.draining = False
            self.busy = False
            self.worker_id = "w"

        def readiness(self) -> tuple[bool, str]:
            return self.ok, "" if self.ok else "GPU sick"

    h = WorkerHost(lambda wid: W(False))  # type: ignore[arg-type,return-value]
    assert h.readiness() == (False, "no workers running")
    h._slots.append(_slot_of(W(False)))
    assert h.readiness() == (False, "GPU sick")
    h._slots.append(_slot_of(W(True)))
    assert h.readiness() == (True, "")  # one ready worker: the host serves


def _slot_of(w: object) -> object:
    from distrs.worker.host import _Slot

    return _Slot(w)  # type: ignore[arg-type]
