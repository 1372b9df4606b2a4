"""The kernel images build and judge `kernelbench` candidates, through the release users deploy.

`make images IMAGES="worker-kernels worker-gpu-kernels"` makes a compile image with torch,
ninja and nvcc from PyPI wheels and an execute image with the same torch. Here the chart runs
with its compile pool on the first and its execute pool on the second (execute on the CPU: this
machine has no GPU), and a trainer submits two candidates through the proxy:

* a C++ CPU extension (`backend: cpp`): built in the compile image, loaded and judged in the
  execute image, so it ends `ok` only if both images carry the same torch;
* a CUDA extension: nvcc in the compile image builds it for sm_90 (H100/H200) with no GPU; the
  CPU execute pool cannot judge it, so it ends `internal_error` after a passed compile stage.

Builds cost minutes of CPU here, so the compile pool keeps its build cache
(`DISTRS_KERNELS_CACHE_DIR`) on a host directory named by the hash of the wheel locks: the
worker's own cache key (torch version, nvcc's and g++'s identities, arch list) decides what it
may reuse, so a warm run, or one after a source change that rebuilt the images from the same
wheels, reuses modules built by an identical toolchain, and a new toolchain builds anew. (Each
compile image also builds a small sm_90 kernel with its nvcc when it is made.)
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from scripts import build_images
from tests.fixtures.kernel_problems import CUDA_ADD_RELU, HONEST, REFERENCE
from tests.pods.cluster import System
from tests.pods.test_pods_release import judge

pytestmark = [pytest.mark.pods, pytest.mark.kernel_images, pytest.mark.timeout(3600)]

CACHE_ROOT = Path("/var/tmp/distrs-pods-kernels")
BUILD_S = 1800  # a cold CUDA build of a torch extension takes minutes on 2 busy cores
KERNEL_ENV = [
    {"name": "DISTRS_KERNELS_CACHE_DIR", "value": "/kernels-cache"},
    {"name": "DISTRS_KERNELS_CUDA_ARCH_LIST", "value": "9.0"},
    {"name": "DISTRS_KERNELS_COMPILE_TIME_S", "value": str(BUILD_S)},
    {"name": "DISTRS_KERNELS_PCH", "value": "false"},  # one build per candidate: no header to amortise
]


@pytest.fixture(scope="module")
def kernel_images(pod_tool: build_images.Tool, pod_images: dict[str, str]) -> dict[str, str]:
    return build_images.build(("worker-kernels", "worker-gpu-kernels"), tool=pod_tool)


def _cache_dir() -> Path:
    """The compile pool's build cache for this wheel set (older sets' caches are removed)."""
    d = CACHE_ROOT / build_images.kernel_locks_key()
    if CACHE_ROOT.is_dir():
        for old in CACHE_ROOT.iterdir():
            if old != d:
                shutil.rmtree(old, ignore_errors=True)
    d.mkdir(parents=True, exist_ok=True)
    d.chmod(0o777)  # the worker runs as uid 10001
    return d


def _values(images: dict[str, str]) -> dict[str, Any]:
    compile_repo, compile_tag = images["worker-kernels"].rsplit(":", 1)
    execute_repo, execute_tag = images["worker-gpu-kernels"].rsplit(":", 1)
    return {
        "proxy": {"replicas": 1},
        "planner": {"intervalSeconds": 1, "workerStartSeconds": 0},
        "pipelines": {"stages": {"compile": {"timeout_s": BUILD_S}, "execute": {"timeout_s": 600}}},
        "workers": {
            "stages": {
                "compile": {
                    "image": {"repository": compile_repo, "tag": compile_tag},
                    "rewardTypes": ["kernelbench"],
                    "timeoutSeconds": BUILD_S,
                    "extraEnv": KERNEL_ENV,
                },
                "execute": {
                    "image": {"repository": execute_repo, "tag": execute_tag},
                    "rewardTypes": ["kernelbench"],
                    "timeoutSeconds": 600,
                    "extraEnv": [{"name": "DISTRS_KERNELS_DEVICE", "value": "cpu"}],
                },
                "run": {"enabled": False},
                "verify": {"enabled": False},
            }
        },
    }


def _payload(candidate: str, backend: str) -> dict[str, Any]:
    return {
        "original_model_src": REFERENCE,
        "custom_model_src": candidate,
        "backend": backend,
        "num_correct_trials": 2,
        "num_perf_trials": 5,
    }


def test_kernel_images_build_on_cpu_and_judge_with_the_same_torch(
    pod_system: Callable[..., System], kernel_images: dict[str, str]
) -> None:
    cache = _cache_dir()
    s = pod_system(_values(kernel_images), host_mounts={"compile": [(cache, "/kernels-cache")]})
    cpp, cuda = judge(
        s,
        [("kernelbench", _payload(HONEST, "cpp")), ("kernelbench", _payload(CUDA_ADD_RELU, "cuda"))],
        wait_s=2 * BUILD_S,
    )

    # The C++ extension: built by the compile image, loaded and judged by the execute image.
    assert (cpp["status"], cpp["detail"].get("correctness")) == ("ok", True), cpp
    assert [st["name"] for st in cpp["stages"]] == ["compile", "execute"], cpp

    # The CUDA extension: nvcc ran in the compile image; the CPU execute pool cannot judge it.
    assert [st["name"] for st in cuda["stages"]] == ["compile", "execute"], cuda
    assert cuda["stages"][0]["outcome"] == "next", cuda
    assert cuda["status"] == "internal_error", cuda
    sm90 = [b"-arch sm_90" in p.read_bytes() for p in cache.glob("*/*.so")]
    assert True in sm90, "the CUDA module carries sm_90 device code"
    assert False in sm90, "the C++ module carries no device code"
