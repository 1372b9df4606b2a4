"""The kernel images' wheel locks (sandbox/kernels/*.txt) agree with the project and each other.

The compile image builds with nvcc from nvcc.txt against torch from torch.txt, and the execute
image loads what it built with torch from torch.txt: a lock edited by hand (or resolved for
another torch) that breaks one of these would only show as a failed image build or, worse, as
modules that do not load on the execute side.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

from scripts import build_images

ROOT = Path(__file__).resolve().parents[3]
LINE = re.compile(r"^([a-z0-9][a-z0-9._-]*)==([^\s]+) --hash=sha256:([0-9a-f]{64})$")


def pins(name: str) -> dict[str, str]:
    out = {}
    for line in (ROOT / "sandbox" / "kernels" / f"{name}.txt").read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        m = LINE.match(line)
        assert m, f"{name}.txt: not 'name==version --hash=sha256:...': {line!r}"
        out[m.group(1)] = m.group(2)
    return out


def test_every_pin_carries_a_hash_and_the_two_sets_do_not_overlap() -> None:
    torch, nvcc = pins("torch"), pins("nvcc")
    assert {"torch", "ninja", "nvidia-cuda-runtime"} <= set(torch)
    assert {"nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-nvvm", "nvidia-cuda-cccl"} <= set(nvcc)
    assert not set(torch) & set(nvcc)


def test_the_locked_torch_satisfies_the_kernels_extra() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extra = meta["project"]["optional-dependencies"]["kernels"]
    torch = pins("torch")
    for spec in map(Requirement, extra):
        assert spec.specifier.contains(torch[spec.name], prereleases=True), (spec, torch[spec.name])


def test_nvcc_is_the_cuda_release_of_the_runtime_torch_loads() -> None:
    torch, nvcc = pins("torch"), pins("nvcc")
    release = torch["nvidia-cuda-runtime"].split(".")[:2]
    for name in ("nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-nvvm", "nvidia-cuda-cccl"):
        assert nvcc[name].split(".")[:2] == release, (name, nvcc[name], torch["nvidia-cuda-runtime"])


def test_locks_name_the_python_the_images_have() -> None:
    for name in ("torch", "nvcc"):
        assert build_images._lock_python(ROOT / "sandbox" / "kernels" / f"{name}.txt") == "3.11"


def test_kernel_images_are_built_only_when_asked_for() -> None:
    for kind in ("worker-kernels", "worker-gpu-kernels"):
        spec = build_images.SPECS[kind]
        assert kind not in build_images.DEFAULT_KINDS
        assert spec.parent in build_images.DEFAULT_KINDS
        assert spec.dockerfile and (ROOT / "sandbox" / spec.dockerfile).is_file()
    assert build_images.SPECS["worker-kernels"].locks == ("torch", "nvcc")
    assert build_images.SPECS["worker-gpu-kernels"].locks == ("torch",)
