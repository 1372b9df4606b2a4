"""The worker host: resizing threads, idle workers drained first, EOF drains everything."""

from __future__ import annotations

import io
import threading

from distrs.worker.host import WorkerHost


class FakeWorker:
    def __init__(self, worker_id: str, busy: bool = False) -> None:
        self.worker_id = worker_id
        self.busy = busy
        self._drain = threading.Event()
        self.release = threading.Event()

    @property
    def draining(self) -> bool:
        return self._drain.is_set()

    def request_drain(self) -> None:
        self._drain.set()

    def run(self) -> None:
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
