"""How the GPU an execute worker times kernels on is shared, and the flags results carry for it.

Timing is only comparable between runs on the same kind of GPU share:

* ``exclusive`` (``nvidia.com/gpu: 1``): the worker owns a whole GPU; timings rank kernels.
* ``mig``: a MIG slice (``nvidia.com/mig-1g.10gb`` ...), one execute worker per slice. The slice
  has its own SMs and memory, so timing is stable, but it is the *slice's* timing: it compares
  with runs on the same slice profile only, not with whole GPUs.
* ``time-sliced``: the device plugin's time-slicing hands one GPU to several pods, whose
  kernels interleave with ours; runtimes and speedups then depend on the neighbours and are unfit
  to rank kernels. Such results are flagged, not refused.

The chart says which one a pod has (``DISTRS_GPU_SHARING``, ``DISTRS_GPU_RESOURCE``; see
docs/kubernetes.md "GPU stages"); a ``MIG-`` device UUID in ``CUDA_VISIBLE_DEVICES`` /
``NVIDIA_VISIBLE_DEVICES`` marks a MIG slice even without them. ``timing_flags()`` is what an
execute handler puts in its result's ``detail["flags"]``: a list of ``{"flag", "why"}``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

SHARINGS = ("exclusive", "mig", "time-sliced")


def _visible(env: Mapping[str, str]) -> str:
    for var in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"):
        v = (env.get(var) or "").strip()
        if v:
            return v
    return ""


def gpu_sharing(env: Mapping[str, str] | None = None) -> str:
    """``exclusive``, ``mig`` or ``time-sliced`` for this worker's GPU (see the module docstring)."""
    env = os.environ if env is None else env
    said = (env.get("DISTRS_GPU_SHARING") or "").strip().lower()
    if said in SHARINGS:
        return said
    resource = env.get("DISTRS_GPU_RESOURCE") or ""
    if resource.startswith("nvidia.com/mig-") or _visible(env).startswith("MIG-"):
        return "mig"
    return "exclusive"


def slice_name(env: Mapping[str, str] | None = None) -> str:
    """The MIG profile (``1g.10gb``) from the resource name, else the slice's UUID, else ``?``."""
    env = os.environ if env is None else env
    resource = env.get("DISTRS_GPU_RESOURCE") or ""
    if resource.startswith("nvidia.com/mig-"):
        return resource.removeprefix("nvidia.com/mig-")
    return _visible(env) or "?"


def timing_flags(env: Mapping[str, str] | None = None) -> list[dict[str, str]]:
    """Flags for a result whose timing was measured here: ``[]`` on a GPU of its own."""
    env = os.environ if env is None else env
    sharing = gpu_sharing(env)
    if sharing == "mig":
        return [
            {
                "flag": "mig_slice",
                "why": f"timed on MIG slice {slice_name(env)}: runtimes and speedups compare only with "
                "runs on the same slice profile, not with whole GPUs",
            }
        ]
    if sharing == "time-sliced":
        return [
            {
                "flag": "time_sliced_gpu",
                "why": "the GPU is time-sliced between pods, whose kernels interleave with this one: "
                "runtimes and speedups are unfit to rank kernels",
            }
        ]
    return []
