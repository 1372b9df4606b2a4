"""The ``execute`` stage of ``kernelbench``: the shipped candidate judged against the reference.

Per request, two fresh jailed processes (``judge_process.py``), each in its own sandbox session:
the *reference* (``Model``) and the *candidate* (``ModelNew``, loading the modules the compile
stage shipped; nothing is compiled here). No CUDA context, stream, allocation or seed survives
a request, and the candidate never shares a process with the reference: it cannot read the
reference's freed output, change its inputs, or see the seeds before its inputs are made. The
host (this module) holds the verdict: it draws every seed (``secrets``), plans the comparison
and adds up what the reference's process reports (``compare.py``), and times calls on its own
clock (``timing.py``).

Outputs never leave the device whole. The reference's process compares the candidate's outputs
with its own, chunk by chunk, on its device: the candidate copies each chunk into a sealed
shared window the host made (``window.py``), which the reference reads and never writes
(``tensors.py``). So a 6 GiB output costs two copies through page-locked memory per trial, and
the candidate still never sees anything of the reference's. Inputs are made on the device from
the secret seed where the problem allows (``get_inputs()`` under the device as default device).

The steps of one request (correctness, timing, the last checks) and whose each fault is are
``request_judge.py``'s; this module is the stage's handler: readiness (torch, the GPU it owns),
the payload, and the jailed judging processes it starts for the judge.
"""

from __future__ import annotations

import os
from contextlib import ExitStack

from distrs.core.model import Status
from distrs.rewards.base import InvalidPayload, MiB, StageInput, StageOutput
from distrs.rewards.cuda import gpu_devices, gpu_mounts
from distrs.rewards.kernelbench.faults import CandidateFault, HarnessFault, Report, fault_result
from distrs.rewards.kernelbench.handler_base import KernelHandler
from distrs.rewards.kernelbench.in_jail import JUDGE_PROCESS
from distrs.rewards.kernelbench.jailed import JailedChild
from distrs.rewards.kernelbench.payload import KernelPayload, parse_payload
from distrs.rewards.kernelbench.request_judge import Child, Judge, RefTimes, json_list
from distrs.rewards.kernelbench.settings import KernelSettings
from distrs.sandbox import Limits, MemoryKind, Sandbox, SandboxError


class ExecuteHandler(KernelHandler):
    def __init__(
        self, sandbox: Sandbox | None = None, settings: KernelSettings | None = None, dev: str = "/dev"
    ) -> None:
        super().__init__(sandbox, settings)
        self._dev = dev
        self.ref_times = RefTimes()

    def ready(self) -> tuple[bool, str]:
        ok, why = self.toolchain_ready()
        if not ok:
            return ok, why
        if self._settings.device == "cuda":
            gpus = gpu_devices(self._dev)
            if not gpus:
                return False, (
                    f"no NVIDIA GPU on this worker (no {self._dev}/nvidia<N> device); "
                    "DISTRS_KERNELS_DEVICE=cpu serves CPU extensions (backend 'cpp') only"
                )
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            if len(gpus) > 1 and (visible is None or "," in visible):
                return False, f"worker sees {len(gpus)} GPUs; an execute worker must own exactly one"
        return self.sandbox_ready()

    def run(self, inp: StageInput) -> StageOutput:
        try:
            p = parse_payload(inp.payload)
        except InvalidPayload as e:
            return e.output()
        if p.device == "cuda" and self._settings.device != "cuda":
            return StageOutput.final(
                Status.INTERNAL_ERROR, 0.0, error="backend 'cuda' reached an execute worker without a GPU"
            )
        ok, why = self.ready()
        if not ok:
            return StageOutput.final(Status.INTERNAL_ERROR, 0.0, error=why)
        return self.judge(inp, p)

    def judge(self, inp: StageInput, p: KernelPayload) -> StageOutput:
        """Judge a valid payload on a ready worker: every fault mapped to whose it is."""
        report = Report(flags=json_list(inp, "flags"))
        try:
            return Judge(self, inp, p, report).run()
        except HarnessFault as e:
            return StageOutput.final(
                Status.INTERNAL_ERROR, 0.0, error=str(e), compiled=True, flags=report.flags
            )
        except CandidateFault as e:
            return fault_result(p, report, e)
        except SandboxError as e:
            return StageOutput.final(
                Status.INTERNAL_ERROR, 0.0, error=f"sandbox: {e}", compiled=True, flags=report.flags
            )

    def start_child(
        self, stack: ExitStack, files: dict[str, bytes], device: str, fds: tuple[int, ...]
    ) -> Child:
        """One judging process in a fresh jailed session holding ``files``."""
        s = self._settings
        exe, _ = self.toolchain.python.get()
        session = stack.enter_context(self.sandbox.session(disk_bytes=256 * MiB))
        for name, data in files.items():
            session.write_file(name, data)
        extra = gpu_mounts(self._dev) if device == "cuda" else None
        limits = Limits(
            wall_s=3600.0,
            cpu_s=3600.0,
            memory_bytes=s.execute_memory_mb * MiB,
            memory_kind=MemoryKind.DATA,
            nproc=512,
            fsize_bytes=64 * MiB,
            nofile=1024,
            tmpfs_bytes=256 * MiB,
        )
        helper = session.start(
            [exe, "-I", "-B", JUDGE_PROCESS],
            limits=limits,
            env=self.toolchain.jail_env(build=False),
            mounts=self.toolchain.jail_mounts(extra),
            fds=fds,
        )
        child = JailedChild(helper, 0)
        stack.callback(child.close)
        return child
