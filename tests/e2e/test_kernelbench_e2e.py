"""``kernelbench`` through ``distrs up`` as a user runs it on a machine without a GPU: compile
workers build candidates in the jail and send honest kernels on to the execute stage; the CPU
tier's candidates (C++ CPU extensions) are judged there by an execute worker with
``DISTRS_KERNELS_DEVICE=cpu``; hacks and build errors end at compile with score 0.

Builds are cached by content under /var/tmp (as a compile pool's shared volume would keep them):
a first run on a machine pays for two nvcc builds and one g++ build.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.fixtures.batches import submit_and_wait
from tests.fixtures.kernel_problems import (
    CUDA_ADD_RELU,
    CUDA_SYNTAX_ERROR,
    FORGED_EXIT,
    HONEST,
    NO_KERNEL,
    REFERENCE,
    TRY_FALLBACK,
)
from tests.fixtures.service import free_port, wait_http
from tests.integration.rewards.kernelbench.conftest import CACHE_DIR
from tests.requirements import need

pytestmark = [
    pytest.mark.kernels,
    pytest.mark.slow,
]


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    need("torch", "compile and execute workers build and judge kernels with torch (the 'kernels' extra)")
    tmp = tmp_path_factory.mktemp("kb-up")
    cfg = tmp / "pipelines.yaml"
    # cold nvcc builds of torch extensions take minutes on a 2-core machine
    cfg.write_text(
        yaml.safe_dump({"stages": {"compile": {"timeout_s": 1500}, "execute": {"timeout_s": 300}}})
    )
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DISTRS_")},
        "DISTRS_KERNELS_DEVICE": "cpu",
        "DISTRS_KERNELS_CACHE_DIR": CACHE_DIR,
        "DISTRS_KERNELS_COMPILE_TIME_S": "1500",
    }
    cmd = [sys.executable, "-m", "distrs.cli", "up", "--port", str(port), "--insecure", "--config", str(cfg)]
    log = open(tmp / "up.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [*cmd, "--max-workers", "2", "--log-level", "warning"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/readyz", proc=proc, timeout_s=60)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        log.close()
        if proc.returncode != 0:
            print(Path(tmp / "up.log").read_text(errors="replace")[-6000:])


def kb(candidate: str, backend: str = "cpp", **kw: Any) -> tuple[str, dict[str, Any]]:
    return "kernelbench", {
        "original_model_src": REFERENCE,
        "custom_model_src": candidate,
        "backend": backend,
        "num_perf_trials": 10,
        **kw,
    }


@pytest.mark.timeout(1800)
def test_kernelbench_through_distrs_up(up: str) -> None:
    items = [
        kb(HONEST),
        kb(NO_KERNEL),
        kb(TRY_FALLBACK),
        kb(FORGED_EXIT),
        kb(HONEST, completion="no code here", custom_model_src=None, reward="kernelgym"),
    ]
    cuda = shutil.which("nvcc") is not None or os.path.exists("/usr/local/cuda/bin/nvcc")
    if cuda:
        items += [kb(CUDA_SYNTAX_ERROR, "cuda"), kb(CUDA_ADD_RELU, "cuda")]
    with httpx.Client(base_url=up, timeout=60) as c:
        types = c.get("/v1/reward-types").json()["reward_types"]
        assert types["kernelbench"] == {"stages": ["compile", "execute"], "ready": True}
        _, body = submit_and_wait(c, "kernels", items, wait_s=1700)
    assert body.get("complete"), body
    res = body["results"]
    honest, no_kernel, fallback, forged, no_code = res[:5]
    assert honest["status"] == "ok" and honest["score"] > 0, honest
    assert [s["name"] for s in honest["stages"]] == ["compile", "execute"]
    d = honest["detail"]
    assert d["correctness"] is True and d["runtime"] > 0 and d["ref_runtime"] > 0
    assert d["metadata"]["correctness_trials"] == "(5 / 5)"
    for r, check in (
        (no_kernel, "no_custom_kernel"),
        (fallback, "try_except_fallback"),
        (forged, "tampering"),
    ):
        assert r["status"] == "compile_error" and r["score"] == 0.0, r
        assert [s["name"] for s in r["stages"]] == ["compile"]
        assert check in [x["check"] for x in r["detail"]["rejected"]]
    assert no_code["status"] == "compile_error" and no_code["score"] == -0.5
    assert no_code["detail"]["outcome"] == "format_error"
    if cuda:
        syntax, cuda_ok = res[5:]
        assert syntax["status"] == "compile_error" and syntax["score"] == 0.0, syntax
        assert (
            "error" in syntax["detail"]["compiler_output"]
            and "add_relu_cuda" in syntax["detail"]["compiler_output"]
        )
        # built by nvcc on the CPU, shipped on; the execute worker here has no GPU and says so
        assert [s["name"] for s in cuda_ok["stages"]] == ["compile", "execute"], cuda_ok
        assert cuda_ok["stages"][0]["outcome"] == "next"
        assert cuda_ok["status"] == "internal_error" and "without a GPU" in cuda_ok["detail"]["error"]
