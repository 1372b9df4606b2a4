"""Clients that nobody closed clean up at interpreter exit: no "Task was destroyed but it is
pending!" warning, whichever way the client's event loop was left (run in a child interpreter)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CLIENT_ROOT = Path(__file__).resolve().parents[1]

SCRIPTS = {
    "blocking client never closed": """
        from distrs_client import RewardClient
        c = RewardClient("http://127.0.0.1:9")
    """,
    "shared blocking client": """
        from distrs_client.shared import shared_client
        shared_client("http://127.0.0.1:9")
    """,
    "async client on a loop run by another thread": """
        import asyncio, threading
        from distrs_client.shared import shared_async_client
        loop = asyncio.new_event_loop()
        threading.Thread(target=loop.run_forever, daemon=True).start()
        async def make():
            c = shared_async_client("http://127.0.0.1:9")
            c._bind()
        asyncio.run_coroutine_threadsafe(make(), loop).result()
    """,
    "async client on an idle loop": """
        import asyncio
        from distrs_client import AsyncRewardClient
        loop = asyncio.new_event_loop()
        async def make():
            c = AsyncRewardClient("http://127.0.0.1:9")
            c._bind()
            return c
        client = loop.run_until_complete(make())
    """,
}


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_no_pending_task_warning_at_exit(name: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(CLIENT_ROOT), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPTS[name])],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert "Task was destroyed" not in r.stderr and "never awaited" not in r.stderr, r.stderr
