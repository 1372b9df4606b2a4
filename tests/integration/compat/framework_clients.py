"""How verl's sandbox client calls ``/run_code`` and slime's ``remote_rm`` posts a sample,
reproduced call for call (checked against verl 0.9.1 and slime v0.3.1); the OpenRLHF, verl
utility and TRL tests load those projects' own code instead (``framework_sources.py``).

* verl (``verl/utils/reward_score/sandbox_fusion/utils.py``, ``call_sandbox_api``): ``requests.post``
  of a JSON string with ``Content-Type`` and ``Accept: application/json``; the payload holds
  ``compile_timeout, run_timeout, code, stdin, memory_limit_MB, language, files, fetch_files``;
  a 504 is retried up to 3 attempts with a linearly growing delay (1 s, 2 s; none after the last
  attempt), any other error ends the call; the caller reads ``status`` and
  ``run_result.{status, stdout, stderr, return_code}``.

Sleeps are shortened so the tests stay fast.
"""

from __future__ import annotations

import json
import time
from typing import Any

import requests


def verl_call_sandbox_api(
    url: str,
    code: str,
    stdin: str | None,
    compile_timeout: float,
    run_timeout: float,
    memory_limit_mb: int,
    language: str = "python",
    max_retries: int = 3,
    initial_delay_s: float = 0.05,
    headers: dict[str, str] | None = None,
) -> tuple[dict[str, Any] | None, str | None, int]:
    """(response JSON, error, attempts), retrying 504 only - as verl does."""
    payload = json.dumps(
        {
            "compile_timeout": compile_timeout,
            "run_timeout": run_timeout,
            "code": code,
            "stdin": stdin,
            "memory_limit_MB": memory_limit_mb,
            "language": language,
            "files": {},
            "fetch_files": [],
        }
    )
    hdrs = {"Content-Type": "application/json", "Accept": "application/json", **(headers or {})}
    last_error = None
    for attempt in range(max_retries):
        try:
            resp = requests.post(url, headers=hdrs, data=payload, timeout=compile_timeout + run_timeout + 10)
            if resp.status_code == 504:
                last_error = f"504 Gateway Timeout on attempt {attempt + 1}"
                if attempt < max_retries - 1:
                    time.sleep(initial_delay_s * (attempt + 1))
                continue
            resp.raise_for_status()
            return resp.json(), None, attempt + 1
        except requests.exceptions.RequestException as e:
            last_error = f"API request error: {e}"
            break
    return None, last_error, attempt + 1


async def slime_remote_rm(url: str, sample: dict[str, Any], max_retries: int = 10) -> Any:
    """slime's ``remote_rm`` (``slime/rollout/rm_hub/__init__.py``, checked against slime v0.3.1,
    commit a6272da, and main at 624b824; slime is not on PyPI - ``test_slime.py`` also runs the
    real module where a checkout is given): one aiohttp POST of ``{"prompt", "response",
    "label"}`` on a session with a 120 s total timeout, ``raise_for_status``, up to 10 attempts
    with a backoff of ``min(2**attempt, 30)`` s plus jitter; returns the parsed JSON, which slime
    keeps as the reward (``reward[K]`` with ``--reward-key K``). Backoff shortened here."""
    import asyncio

    import aiohttp

    body = {"prompt": sample["prompt"], "response": sample["response"], "label": sample["label"]}
    timeout = aiohttp.ClientTimeout(total=120)
    connector = aiohttp.TCPConnector(limit=64, enable_cleanup_closed=True)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        for attempt in range(max_retries):
            try:
                async with session.post(url, json=body) as resp:
                    resp.raise_for_status()
                    return await resp.json()
            except Exception:
                if attempt + 1 >= max_retries:
                    raise
                await asyncio.sleep(0.01 * min(2**attempt, 30))
    return None
