"""Fixtures of the pod-runtime tier: built images and a factory that starts a whole release.

The tier needs podman (and runc); where no container can start it skips with the reason —
except under CI=true, where that is a failure (tests/requirements.py). Images are built by scripts/build_images.py, the
code behind `make images` (cached: seconds when nothing changed).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from scripts import build_images
from tests.pods.cluster import System, start_system
from tests.requirements import need

KINDS = ("service", "worker", "worker-gpu", "redis")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The kernel-images tier runs only when asked for (deselected, not skipped, otherwise).

    Its images are built FROM the worker images, so every source change rebuilds them (about 11
    minutes here, on top of the test's own CUDA build) and `make test` would outgrow its budget;
    `make test-kernel-images` runs it."""
    if config.getoption("--kernel-images", default=False):  # declared in the root conftest.py
        return
    keep = [it for it in items if it.get_closest_marker("kernel_images") is None]
    if len(keep) != len(items):
        config.hook.pytest_deselected(items=[it for it in items if it not in keep])
        items[:] = keep


def _unavailable(reason: str) -> None:
    need("pod runtime", "the pod-runtime tier starts containers", found=False, detail=reason)


@pytest.fixture(scope="session")
def pod_tool() -> build_images.Tool:
    if not shutil.which("podman"):
        _unavailable("podman is not installed (scripts/system-deps.sh installs it)")
    tool = build_images.Tool("podman")
    r = tool.run("info", "--format", "{{.Host.OCIRuntime.Name}}", check=False, capture=True)
    if r.returncode != 0:
        _unavailable(f"podman cannot start: {r.stderr.strip()[-500:]}")
    return tool


@pytest.fixture(scope="session")
def pod_images(pod_tool: build_images.Tool) -> dict[str, str]:
    """kind -> image name, built (or found up to date) through `make images`' code.

    The Redis image comes first (a base import, no container needed); a container started from
    it tells whether this host can run containers at all before anything else is built.
    """
    images = build_images.build(("redis",), tool=pod_tool)
    r = pod_tool.run("run", "--rm", "--network", "none", images["redis"], "true", check=False, capture=True)
    if r.returncode != 0:
        _unavailable(f"podman cannot start a container here: {r.stderr.strip()[-800:]}")
    images.update(build_images.build(KINDS, tool=pod_tool))
    return images


@pytest.fixture
def pod_system(pod_tool: build_images.Tool, pod_images: dict[str, str]) -> Iterator[Callable[..., System]]:
    """Factory: `pod_system(values, seccomp_profiles=None, wait_workers=True, host_mounts=None)` starts a release.

    Returns the `System` handles (proxy URL, tokens, `workers` by stage, `logs(name)`,
    `ready(name)`, `stop()`); every release started is stopped after the test.
    """
    started: list[System] = []

    def start(
        values: dict[str, Any],
        seccomp_profiles: dict[str, Path] | None = None,
        wait_workers: bool = True,
        host_mounts: dict[str, list[tuple[Path, str]]] | None = None,
    ) -> System:
        s = start_system(
            values,
            pod_images,
            pod_tool.env,
            seccomp_profiles=seccomp_profiles,
            wait_workers=wait_workers,
            host_mounts=host_mounts,
        )
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()
