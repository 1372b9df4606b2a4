"""The ``compile`` stage of ``kernelbench``: static checks, then the candidate built on a CPU worker.

Order, cheapest first, each ending the request where it fails (score from the payload's
formula, ``formulas.py``):

1. Payload (``invalid`` for the trainer's mistakes) and a code block in the completion (a
   format error otherwise).
2. Static checks (``static_checks.py``): a ``ModelNew`` and a custom kernel for the backend must
   exist; fallbacks, extra streams or threads and tampering are rejected (``compile_error``
   with ``detail.rejected``), suspicious patterns flagged for the execute stage to report.
3. The candidate imported as KernelBench does (``import_candidate.py``, in the jail: importing it
   runs untrusted Python). Each ``load_inline`` call is built by the host in a clean jail of its
   own (``build_call.py``) for ``TORCH_CUDA_ARCH_LIST`` of the execute pool, or taken from the
   build cache (``module_cache.py``, keyed by the call and the toolchain); a compiler error is
   ``compile_error`` with the compiler's message.

The execute stage gets the built modules as the ``kernel_modules`` artifact and never compiles.
A whole-candidate cache (source, backend, toolchain) answers an identical resubmission without
starting a jail at all.

Time, and whose it is. A build waits until the CPUs it needs are free (``admission.py``) and
that wait is the service's: the build's own limits start when it is admitted. The candidate is
charged ``timeout`` only where its build used its CPU limit (``compile_cpu_s``, counted over all
its compilers) or its own import ran past its wall limit. A build cut by its wall limit, or by the
stage's time running out while it waited or built, got less CPU than it was owed: the machine was
oversubscribed, and the request ends ``internal_error``. The two jailed interpreters a request
needs are started ahead of it while the worker is idle (``warm.py``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import time
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

from distrs.core.model import Status
from distrs.rewards.base import (
    MAX_BINARY_BYTES,
    InvalidPayload,
    MiB,
    StageInput,
    StageOutput,
    snippet,
    stage_budget,
)
from distrs.rewards.compile_cache import CompileCache
from distrs.rewards.kernelbench import admission
from distrs.rewards.kernelbench.formulas import Outcome, Stage, score
from distrs.rewards.kernelbench.handler_base import KernelHandler
from distrs.rewards.kernelbench.in_jail import (
    BUILD_CALL,
    CALLKEY,
    IMPORT_CANDIDATE,
    NVCC_STEPS,
    callkey,
    programs,
)
from distrs.rewards.kernelbench.jailed import ChildGone, ChildTimeout, JailedChild
from distrs.rewards.kernelbench.module_cache import BuildError, Built, ModuleCache
from distrs.rewards.kernelbench.payload import KernelPayload, parse_payload
from distrs.rewards.kernelbench.pch import GCH_MAX_BYTES, PchStore
from distrs.rewards.kernelbench.settings import KernelSettings
from distrs.rewards.kernelbench.static_checks import check_source
from distrs.rewards.kernelbench.static_checks.findings import StaticReport
from distrs.rewards.kernelbench.warm import Jail, WarmJails
from distrs.sandbox import Limits, MemoryKind, Sandbox, SandboxError

log = logging.getLogger(__name__)
MODULES = "kernel_modules"
MAX_BUILD_CALLS = 8
IMPORT, BUILD = "import", "build"  # the two kinds of jail a request starts
PCH_WAIT_S = 3600.0  # how long a precompile waits for a CPU before it gives up
STARTUP_S = 600.0  # a jail's interpreter importing torch (seconds; minutes on a loaded machine)
BUILD_DISK_BYTES = 2048 * MiB  # a build's sources, nvcc's intermediates and objects


def findings(items: Any) -> list[dict[str, str]]:
    return [{"check": f.check, "why": f.why} for f in items]


def failed(p: KernelPayload, stage: Stage, status: Status, **detail: Any) -> StageOutput:
    """A final result before the execute stage: KernelBench's fields say what was reached."""
    value = score(p.reward, Outcome(stage), p.speedup_cap)
    detail.setdefault("compiled", False)
    detail.setdefault("correctness", False)
    detail.setdefault("runtime", -1.0)
    detail.setdefault("ref_runtime", -1.0)
    detail.setdefault("outcome", stage.value)
    return StageOutput.final(status, value, **detail)


def build_limits(settings: KernelSettings, wall_s: float) -> Limits:
    """A build jail's limits: each of its processes gets the build's whole CPU limit (the
    builder's watchdog bounds their sum); ``wall_s`` is enforced by whoever waits on it."""
    return Limits(
        wall_s=wall_s,
        cpu_s=settings.compile_cpu_s,
        memory_bytes=settings.compile_memory_mb * MiB,
        memory_kind=MemoryKind.DATA,
        nproc=512,
        fsize_bytes=1024 * MiB,
        nofile=1024,
        output_bytes=256 * 1024,
        tmpfs_bytes=1024 * MiB,
    )


class CompileHandler(KernelHandler):
    def __init__(self, sandbox: Sandbox | None = None, settings: KernelSettings | None = None) -> None:
        super().__init__(sandbox, settings)
        self._modules = ModuleCache(self._settings.cache_mb * MiB, self._settings.cache_dir)
        self._results = CompileCache(self._settings.cache_mb * MiB)
        self.builds = 0  # clean builds started by this handler (tests and metrics read it)
        self.last_build: dict[str, Any] = {}  # the last builder's reply less its message (benchmarks)
        self._pch: PchStore | None = None
        cpus = self._settings.build_cpus or admission.machine_cpus()
        self.cpus = admission.slots(self._settings.build_cpus_dir or admission.default_dir(), cpus)
        self.warm = WarmJails(self._start_jail, enabled=self._settings.prestart)

    def ready(self) -> tuple[bool, str]:
        """Whether builds can run; where they can, the next request's jails start now (the
        worker asks before each lease it waits for: while it is idle)."""
        ok, why = self.toolchain_ready(nvcc=True)
        ok, why = (ok, why) if not ok else self.sandbox_ready()
        if ok:
            self.warm.refill(IMPORT, BUILD)
        return ok, why

    def close(self) -> None:
        """End the jails started ahead (their sessions hold mounts under the sandbox's work dir)."""
        self.warm.close()

    def _toolchain(self) -> str:
        return self.toolchain.key()

    def pch(self) -> PchStore | None:
        """The precompiled headers of this handler (None where turned off)."""
        if not self._settings.pch:
            return None
        if self._pch is None:
            root = os.path.join(self._settings.cache_dir, "pch") if self._settings.cache_dir else ""
            self._pch = PchStore(root, self._toolchain(), self._precompile)
        return self._pch

    def _precompile(self, extra_cflags: list[str], out: Path) -> bool:
        """Make the precompiled header in a jail, on a CPU of its own, and copy it to ``out``
        (see ``pch.py``)."""
        cpu = self.cpus.acquire(1, time.monotonic() + PCH_WAIT_S)
        if cpu is None:
            log.warning("no CPU came free to precompile torch/extension.h in %.0f s", PCH_WAIT_S)
            return False
        try:
            return self._precompile_admitted(extra_cflags, out)
        finally:
            cpu.release()

    def _precompile_admitted(self, extra_cflags: list[str], out: Path) -> bool:
        exe, _ = self.toolchain.python.get()
        with self.sandbox.session(disk_bytes=GCH_MAX_BYTES + 256 * MiB) as s:
            s.write_file(BUILD_CALL, programs(BUILD_CALL)[BUILD_CALL])
            r = s.run(
                [exe, "-I", "-B", BUILD_CALL, "--pch"],
                limits=build_limits(self._settings, 1800.0),
                stdin=json.dumps(extra_cflags).encode(),
                env=self.toolchain.jail_env(build=True),
                mounts=self.toolchain.jail_mounts(),
            )
            last = _last_json(r.stdout)
            if not last.get("ok"):
                log.warning(
                    "precompiling torch/extension.h failed: %s",
                    str(last.get("message", r.describe()))[-2000:],
                )
                return False
            for name in ("extension.h", "extension.h.gch"):
                data = s.read_file(name, GCH_MAX_BYTES)
                if data is None:
                    return False
                (out / "torch").mkdir(exist_ok=True)
                (out / "torch" / name).write_bytes(data)
        return True

    def _start_jail(self, kind: str) -> Jail:
        """A session with ``kind``'s child started in it: ``import_candidate.py`` for the candidate's
        import, ``build_call.py`` for one clean build (it sees the precompiled headers' root)."""
        exe, _ = self.toolchain.python.get()
        stack = ExitStack()
        try:
            if kind == IMPORT:
                s = stack.enter_context(self.sandbox.session(disk_bytes=256 * MiB))
                names, mounts = (IMPORT_CANDIDATE, CALLKEY), self.toolchain.jail_mounts()
            else:
                s = stack.enter_context(self.sandbox.session(disk_bytes=BUILD_DISK_BYTES))
                names, mounts = (BUILD_CALL, NVCC_STEPS), self.toolchain.jail_mounts()
                store = self.pch()
                if store is not None:  # headers made later appear in it: the jail binds the root
                    store.root.mkdir(parents=True, exist_ok=True)
                    mounts = replace(mounts, ro_paths=(*mounts.ro_paths, str(store.root)))
            for name, data in programs(*names).items():
                s.write_file(name, data)
            helper = s.start(
                [exe, "-I", "-B", names[0]],
                limits=build_limits(self._settings, self._settings.compile_time_s),
                env=self.toolchain.jail_env(build=True),
                mounts=mounts,
            )
            child = JailedChild(helper, 0)
            stack.callback(child.close)
            try:  # torch imported: ready for its request
                hello = child.recv_object(time.monotonic() + STARTUP_S)
            except (ChildGone, ChildTimeout) as e:
                raise SandboxError(f"the {kind} jail did not start: {e or 'no answer'}") from None
            if hello.get("ready") is not True:
                raise SandboxError(f"the {kind} jail did not start: it said {str(hello)[:200]}")
            return Jail(s, helper, child, stack)
        except BaseException:
            stack.close()
            raise

    def run(self, inp: StageInput) -> StageOutput:
        try:
            p = parse_payload(inp.payload)
        except InvalidPayload as e:
            return e.output()
        if p.custom_model_src is None:
            return failed(
                p, Stage.FORMAT_ERROR, Status.COMPILE_ERROR, reason="the completion has no python code block"
            )
        report = check_source(p.custom_model_src, p.backend)
        if not report.ok:
            return failed(
                p,
                Stage.REJECTED,
                Status.COMPILE_ERROR,
                reason="rejected by static checks: " + "; ".join(f.check for f in report.rejections),
                rejected=findings(report.rejections),
                flags=findings(report.flags),
            )
        key = hashlib.sha256(
            json.dumps(["kb-candidate/1", p.backend, p.custom_model_src, self._toolchain()]).encode()
        ).hexdigest()
        cached = self._results.get(key)
        if isinstance(cached, StageOutput):
            if cached.outcome == "next":
                return StageOutput.next({**cached.artifacts, "compile_cached": "1"})
            # scored by this payload's formula: the same source may come with another reward
            stage = Stage(cached.detail.get("outcome", Stage.COMPILE_ERROR.value))
            value = score(p.reward, Outcome(stage), p.speedup_cap)
            return StageOutput.final(cached.status or Status.COMPILE_ERROR, value, **cached.detail)
        out = self._compile(inp, p, report)
        if out.outcome == "next" or out.status is Status.COMPILE_ERROR:
            self._results.put(key, out)
        return out

    def _compile(self, inp: StageInput, p: KernelPayload, report: StaticReport) -> StageOutput:
        started = time.monotonic()
        deadline = started + stage_budget(inp)
        try:
            done, modules, build_error = self._import_candidate(p.custom_model_src or "", deadline)
        except BuildTimeout as e:
            return failed(p, Stage.COMPILE_ERROR, Status.TIMEOUT, reason=str(e))
        except ServiceTime as e:
            return StageOutput.final(Status.INTERNAL_ERROR, 0.0, error=str(e))
        compile_s = round(time.monotonic() - started, 3)
        if build_error is not None:
            return failed(
                p,
                Stage.COMPILE_ERROR,
                Status.COMPILE_ERROR,
                reason="build failed",
                compiler_output=snippet(build_error, 8000),
                compile_s=compile_s,
            )
        if not done.get("ok"):
            return failed(
                p,
                Stage.COMPILE_ERROR,
                Status.COMPILE_ERROR,
                reason=f"importing the candidate failed ({done.get('kind')})",
                compiler_output=snippet(str(done.get("message", "")), 8000),
                compile_s=compile_s,
            )
        if not modules:
            return failed(
                p,
                Stage.REJECTED,
                Status.COMPILE_ERROR,
                reason="no custom kernel was built",
                rejected=[
                    {"check": "no_custom_kernel", "why": "importing the candidate ran no load_inline call"}
                ],
            )
        artifact = json.dumps(modules)
        if len(artifact) > MAX_BINARY_BYTES * 4 // 3:
            return failed(
                p,
                Stage.COMPILE_ERROR,
                Status.COMPILE_ERROR,
                reason=f"built modules exceed {MAX_BINARY_BYTES} bytes",
            )
        return StageOutput.next(
            {
                MODULES: artifact,
                "flags": json.dumps(findings(report.flags)),
                "kernel_names": json.dumps(list(report.kernel_names)),
                "compile_s": f"{compile_s:.3f}",
            }
        )

    def _import_candidate(
        self, source: str, deadline: float
    ) -> tuple[dict[str, Any], list[dict[str, str]], str | None]:
        """Import the candidate in the jail, building each of its load_inline calls here.

        Returns the child's last message, the shipped modules and the first build error (a
        candidate that catches a failed build still failed to compile). The candidate's own
        import gets ``compile_time_s`` of wall time; the builds it waits for are not counted.
        """
        modules: list[dict[str, str]] = []
        build_error: str | None = None
        own_left = self._settings.compile_time_s
        jail = self.warm.take(IMPORT)
        try:
            jail.session.write_file("candidate.py", source.encode())
            child = jail.child
            child.send({"go": True})
            while True:
                resumed = time.monotonic()
                try:
                    msg = child.recv_object(min(deadline, resumed + own_left))
                except ChildGone as e:
                    return (
                        {"ok": False, "kind": "exit", "message": f"the candidate's import ended: {e}"},
                        modules,
                        build_error,
                    )
                except ChildTimeout:
                    if time.monotonic() - resumed >= own_left - 0.5:
                        raise BuildTimeout(
                            f"importing the candidate took more than {self._settings.compile_time_s:g} s"
                        ) from None
                    raise ServiceTime(
                        "the compile stage's time ran out during the candidate's import, after its builds "
                        "had taken the rest (raise the compile stage's timeout_s)"
                    ) from None
                own_left -= time.monotonic() - resumed
                if "done" in msg:
                    return msg, modules, build_error
                args = msg.get("build")
                if not isinstance(args, dict) or len(modules) >= MAX_BUILD_CALLS:
                    build_error = build_error or f"at most {MAX_BUILD_CALLS} load_inline calls per candidate"
                    child.send({"ok": False, "message": build_error})
                    continue
                built = self._module(args, deadline)
                if isinstance(built, BuildError):
                    build_error = build_error or built.message
                    child.send({"ok": False, "message": built.message})
                    continue
                n = len(modules)
                jail.session.write_file(f"ext{n}.so", built.data)
                modules.append(
                    {
                        "key": callkey.call_key(args),
                        "module": built.module,
                        "file": f"ext{n}.so",
                        "data": base64.b64encode(built.data).decode("ascii"),
                    }
                )
                child.send({"ok": True, "module": built.module, "file": f"ext{n}.so"})
        finally:
            jail.close()

    def _module(self, args: dict[str, Any], deadline: float) -> Built | BuildError:
        key = hashlib.sha256((callkey.call_key(args) + self._toolchain()).encode()).hexdigest()
        hit = self._modules.get(key)
        if hit is not None:
            return hit
        out = self._clean_build(args, deadline)
        self._modules.put(key, out)
        return out

    def _clean_build(self, args: dict[str, Any], deadline: float) -> Built | BuildError:
        """One load_inline call built in a fresh jail where no candidate code runs, once the CPUs
        it needs are free (waiting is not charged to it; see the module docstring)."""
        self.builds += 1
        need = min(self._settings.build_jobs, self.cpus.capacity)
        cpus = self.cpus.acquire(need, deadline - 1.0)
        if cpus is None:
            raise ServiceTime(
                f"no {need} of this machine's {self.cpus.capacity} CPUs came free for the build before the "
                "compile stage's time ran out: the pool runs more builds than the machine has CPUs for"
            )
        try:
            return self._admitted_build(args, need, deadline)
        finally:
            cpus.release()

    def _admitted_build(self, args: dict[str, Any], cpus: int, deadline: float) -> Built | BuildError:
        admitted = time.monotonic()
        wall_end = min(admitted + self._settings.compile_time_s, deadline)
        store = self.pch()
        flags = args.get("extra_cflags") or []
        pch = store.get(flags) if store is not None and isinstance(flags, list) else None
        job = {
            "args": args,
            "pch": pch,  # g++ loads torch/extension.h precompiled (pch.py)
            "cpu_s": self._settings.compile_cpu_s,
            "jobs": cpus,
            "split": self._settings.nvcc_split,
        }
        jail = self.warm.take(BUILD)
        try:
            jail.child.send(job)
            try:
                reply = jail.child.recv_object(wall_end)
            except ChildTimeout:
                raise ServiceTime(
                    f"the build was cut after {time.monotonic() - admitted:.0f} s of wall time (its limit "
                    f"{self._settings.compile_time_s:g} s, or the compile stage's time) before it used its "
                    f"{self._settings.compile_cpu_s:g} s of CPU: the machine gave it less CPU than it needed"
                ) from None
            except ChildGone as e:
                raise SandboxError(f"the kernel builder ended without a reply: {e}") from None
            self.last_build = {k: v for k, v in reply.items() if k != "message"}
            if reply.get("cpu_exceeded"):
                raise BuildTimeout(
                    f"the build used more than its {self._settings.compile_cpu_s:g} s of CPU time"
                )
            if not reply.get("ok"):
                return BuildError(str(reply.get("message", "build failed")))
            data = jail.session.read_file("out.so", MAX_BINARY_BYTES)
            if data is None:
                return BuildError(f"the built module is missing or larger than {MAX_BINARY_BYTES} bytes")
            log.info(
                "built %s in %.1f s (%.1f s of compiler CPU)",
                reply.get("module"),
                reply.get("wall_s", -1),
                reply.get("cpu_s", -1),
            )
            return Built(str(reply["module"]), data)
        finally:
            jail.close()


class ServiceTime(Exception):
    """The service ran out of time or CPU for a build: ``internal_error``, never the candidate's."""


class BuildTimeout(Exception):
    """The candidate's build or import used its own limit: ``timeout``."""


def _last_json(stdout: bytes) -> dict[str, Any]:
    """The JSON object on a child's last stdout line ({} where there is none)."""
    try:
        last = json.loads(stdout.decode(errors="replace").strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {}
    return last if isinstance(last, dict) else {}
