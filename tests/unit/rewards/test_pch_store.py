"""The precompiled header store under concurrency, within one process: every thread asking for a
key gets the one header built for it; a claim left by a dead process is taken over and its
half-made build removed; a live claim is waited for (boundedly) and never built beside.
(Several processes at once, and a claimer killed mid-build: tests/integration/rewards/.)"""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

from distrs.rewards import pch_store
from distrs.rewards.pch_store import PchStore

GCH_BYTES = 1 << 20


class Counting:
    """A precompile that takes a while, counts its runs and writes a header of known size."""

    def __init__(self, delay_s: float = 0.3) -> None:
        self.delay_s = delay_s
        self.runs = 0
        self._lock = threading.Lock()

    def __call__(self, flags: list[str], out: Path) -> bool:
        with self._lock:
            self.runs += 1
        (out / "bits").mkdir()
        with open(out / "bits" / "stdc++.h.gch", "wb") as f:
            f.write(b"\0" * (GCH_BYTES // 2))
            f.flush()
            time.sleep(self.delay_s)  # a reader of a file written in place would see it half-made
            f.write(b"\0" * (GCH_BYTES // 2))
        return True


def store(root: Path, precompile: Counting) -> PchStore:
    return PchStore(str(root), "gcc-1", precompile, header="bits/stdc++.h", kind="t/1")


def test_every_waiting_thread_gets_the_one_complete_header(tmp_path: Path) -> None:
    made = Counting()
    stores = [store(tmp_path, made), store(tmp_path, made)]  # two handlers of one worker
    start = threading.Barrier(8)
    got: list[str | None] = []

    def ask(i: int) -> None:
        start.wait()
        got.append(stores[i % 2].get(["-O2"], wait=True))

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert made.runs == 1
    assert len(got) == 8 and len(set(got)) == 1 and got[0] is not None
    assert (Path(got[0]) / "bits" / "stdc++.h.gch").stat().st_size == GCH_BYTES
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no claim, no build dir


def test_a_claim_left_by_a_dead_process_is_taken_over_and_its_half_build_removed(tmp_path: Path) -> None:
    made = Counting(delay_s=0.0)
    s = store(tmp_path, made)
    key = s.key(["-O2"])
    (tmp_path / f".{key}.claim").write_text("host 999999 0\n")  # nobody holds its lock
    half = tmp_path / f".{key}.build.999999.1" / "bits"
    half.mkdir(parents=True)
    (half / "stdc++.h.gch").write_bytes(b"half")
    d = s.get(["-O2"], wait=True, wait_s=30)
    assert d == str(tmp_path / key) and made.runs == 1
    assert (Path(d) / "bits" / "stdc++.h.gch").stat().st_size == GCH_BYTES
    assert sorted(p.name for p in tmp_path.iterdir()) == [key]


def test_a_live_claim_is_waited_for_and_not_built_beside(tmp_path: Path) -> None:
    made = Counting(delay_s=0.0)
    s = store(tmp_path, made)
    key = s.key(["-O2"])
    holder = pch_store.Claim.take(tmp_path / f".{key}.claim")  # another worker is building it
    assert holder is not None
    assert pch_store.Claim.take(tmp_path / f".{key}.claim") is None  # one claim per key
    assert pch_store.Claim.take_over(tmp_path / f".{key}.claim") is None  # its holder is alive
    assert s.get(["-O2"]) is None  # compiles go on without it meanwhile
    assert s.get(["-O2"], wait=True, wait_s=0.5) is None  # a bounded wait
    assert made.runs == 0
    holder.release()  # it gave up without publishing: the build failed there, not retried here
    time.sleep(0.6)
    assert s.get(["-O2"], wait=True, wait_s=5) is None and made.runs == 0
    assert list(tmp_path.iterdir()) == []


def test_a_waiter_gets_the_header_another_process_published(tmp_path: Path) -> None:
    made = Counting(delay_s=0.0)
    s = store(tmp_path, made)
    key = s.key(["-O2"])
    holder = pch_store.Claim.take(tmp_path / f".{key}.claim")
    assert holder is not None and s.get(["-O2"]) is None
    other = tmp_path / f".{key}.build.1.1"
    other.mkdir()
    Counting(delay_s=0.0)(["-O2"], other)
    other.rename(tmp_path / key)  # what the holder does: publish, then release
    holder.release()
    assert s.get(["-O2"], wait=True, wait_s=5) == str(tmp_path / key) and made.runs == 0


def test_a_claim_whose_holder_lives_is_not_taken_over_even_with_its_lock_free(tmp_path: Path) -> None:
    claim = tmp_path / ".k.claim"  # as written on a filesystem whose flock does nothing
    claim.write_text(f"{socket.gethostname()} {os.getpid()} {pch_store._started(os.getpid())}\n")
    assert pch_store.Claim.take_over(claim) is None
    claim.write_text(f"{socket.gethostname()} {os.getpid()} 1\n")  # that pid, started at another time
    stale = pch_store.Claim.take_over(claim)
    assert stale is not None
    stale.release()
