"""The lifeline watch: ``on_gone`` runs once the write end closes, not before, and only then;
a descriptor that is not open is refused up front rather than read as a dead parent."""

from __future__ import annotations

import os
import threading

import pytest

from distrs.worker.lifeline import watch


def test_on_gone_runs_at_end_of_file_only() -> None:
    r, w = os.pipe()
    gone = threading.Event()
    try:
        thread = watch(r, gone.set)
        os.write(w, b"x")  # data is not the end: nothing happens
        assert not gone.wait(0.2) and thread.is_alive()
        assert not os.get_inheritable(r)  # kept out of the processes the worker starts
    finally:
        os.close(w)
    assert gone.wait(5)
    thread.join(5)
    os.close(r)


def test_a_closed_descriptor_is_refused() -> None:
    r, w = os.pipe()
    os.close(r)
    os.close(w)
    with pytest.raises(ValueError, match="not open"):
        watch(r, lambda: None)
