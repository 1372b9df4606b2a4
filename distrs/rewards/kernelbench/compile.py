"""The ``compile`` stage of ``kernelbench``: static checks, then the candidate built on a CPU worker.

Order, cheapest first, each ending the request where it fails (score from the payload's
formula, ``formulas.py``):

1. Payload (``invalid`` for the trainer's mistakes) and a code block in the completion (a
   format error otherwise).
2. Static checks (``static_checks.py``): a ``ModelNew`` and a custom kernel for the backend must
   exist; fallbacks, extra streams or threads and tampering are rejected (``compile_error``
   with ``detail.rejected``), suspicious patterns flagged for the execute stage to report.
3. The candidate imported as KernelBench does (``build_child.py``, in the jail: importing it
   runs untrusted Python). Each ``load_inline`` call is built by the host in a clean jail of its
   own (``builder_child.py``) for ``TORCH_CUDA_ARCH_LIST`` of the execute pool, or taken from the
   build cache (``module_cache.py``, keyed by the call and the toolchain); a compiler error is
   ``compile_error`` with the compiler's message.

The execute stage gets the built modules as the ``kernel_modules`` artifact and never compiles.
A whole-candidate cache (source, backend, toolchain) answers an identical resubmission without
starting a jail at all.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from distrs.core.model import Status
from distrs.rewards.base import StageInput, StageOutput
from distrs.rewards.compile_cache import CompileCache
from distrs.rewards.interpreter import interpreter
from distrs.rewards.judge import MAX_BINARY_BYTES, InvalidPayload, MiB, snippet, stage_budget
from distrs.rewards.kernelbench import callkey
from distrs.rewards.kernelbench.formulas import Outcome, Stage, score
from distrs.rewards.kernelbench.handler_base import KernelHandler
from distrs.rewards.kernelbench.jailed import ChildGone, ChildTimeout, JailedChild
from distrs.rewards.kernelbench.module_cache import BuildError, Built, ModuleCache
from distrs.rewards.kernelbench.payload import KernelPayload, parse_payload
from distrs.rewards.kernelbench.pch import GCH_MAX_BYTES, PchStore
from distrs.rewards.kernelbench.settings import KernelSettings
from distrs.rewards.kernelbench.static_checks import StaticReport, check_source
from distrs.rewards.kernelbench.toolchain import jail_env, jail_mounts, toolchain_key
from distrs.sandbox import Limits, MemoryKind, Sandbox, SandboxError

log = logging.getLogger(__name__)
HERE = Path(__file__).parent
MODULES = "kernel_modules"
MAX_BUILD_CALLS = 8


def child_files(*names: str) -> dict[str, bytes]:
    return {n: (HERE / n).read_bytes() for n in names}


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
    return Limits(
        wall_s=wall_s,
        cpu_s=wall_s * max(1, settings.build_jobs),
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
        self._pch: PchStore | None = None

    def ready(self) -> tuple[bool, str]:
        ok, why = self.toolchain_ready(nvcc=True)
        return (ok, why) if not ok else self.sandbox_ready()

    def _toolchain(self) -> str:
        return toolchain_key(self._settings.model_dump_json())

    def pch(self) -> PchStore | None:
        """The precompiled headers of this handler (None where turned off)."""
        if not self._settings.pch:
            return None
        if self._pch is None:
            root = os.path.join(self._settings.cache_dir, "pch") if self._settings.cache_dir else ""
            self._pch = PchStore(root, self._toolchain(), self._precompile)
        return self._pch

    def _precompile(self, extra_cflags: list[str], out: Path) -> bool:
        """Make the precompiled header in a jail and copy it to ``out`` (see ``pch.py``)."""
        exe, _ = interpreter(self._settings.python)
        with self.sandbox.session(disk_bytes=GCH_MAX_BYTES + 256 * MiB) as s:
            s.write_file("builder_child.py", child_files("builder_child.py")["builder_child.py"])
            r = s.run(
                [exe, "-I", "-B", "builder_child.py", "--pch"],
                limits=build_limits(self._settings, 1800.0),
                stdin=json.dumps(extra_cflags).encode(),
                env=jail_env(self._settings, build=True),
                mounts=jail_mounts(self._settings),
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
        deadline = started + min(self._settings.compile_time_s, stage_budget(inp))
        try:
            done, modules, build_error = self._import_candidate(p.custom_model_src or "", deadline)
        except (ChildTimeout, BuildTimeout):
            return failed(p, Stage.COMPILE_ERROR, Status.TIMEOUT, reason="the build did not finish in time")
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
        candidate that catches a failed build still failed to compile).
        """
        exe, _ = interpreter(self._settings.python)
        modules: list[dict[str, str]] = []
        build_error: str | None = None
        with self.sandbox.session(disk_bytes=256 * MiB) as s:
            for name, data in child_files("build_child.py", "callkey.py").items():
                s.write_file(name, data)
            s.write_file("candidate.py", source.encode())
            helper = s.start(
                [exe, "-I", "-B", "build_child.py"],
                limits=build_limits(self._settings, 3600.0),
                env=jail_env(self._settings, build=True),
                mounts=jail_mounts(self._settings),
            )
            child = JailedChild(helper, 0)
            try:
                while True:
                    try:
                        msg = child.recv_object(deadline)
                    except ChildGone as e:
                        return (
                            {"ok": False, "kind": "exit", "message": f"the candidate's import ended: {e}"},
                            modules,
                            build_error,
                        )
                    if "done" in msg:
                        return msg, modules, build_error
                    args = msg.get("build")
                    if not isinstance(args, dict) or len(modules) >= MAX_BUILD_CALLS:
                        build_error = (
                            build_error or f"at most {MAX_BUILD_CALLS} load_inline calls per candidate"
                        )
                        child.send({"ok": False, "message": build_error})
                        continue
                    built = self._module(args, deadline)
                    if isinstance(built, BuildError):
                        build_error = build_error or built.message
                        child.send({"ok": False, "message": built.message})
                        continue
                    n = len(modules)
                    s.write_file(f"ext{n}.so", built.data)
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
                child.close()

    def _module(self, args: dict[str, Any], deadline: float) -> Built | BuildError:
        key = hashlib.sha256((callkey.call_key(args) + self._toolchain()).encode()).hexdigest()
        hit = self._modules.get(key)
        if hit is not None:
            return hit
        out = self._clean_build(args, deadline)
        self._modules.put(key, out)
        return out

    def _clean_build(self, args: dict[str, Any], deadline: float) -> Built | BuildError:
        """One load_inline call built in a fresh jail where no candidate code runs."""
        self.builds += 1
        left = deadline - time.monotonic()
        if left <= 1:
            raise BuildTimeout
        exe, _ = interpreter(self._settings.python)
        env = jail_env(self._settings, build=True)
        mounts = jail_mounts(self._settings)
        store = self.pch()
        flags = args.get("extra_cflags") or []
        pch = store.get(flags) if store is not None and isinstance(flags, list) else None
        if pch is not None:  # g++ loads torch/extension.h precompiled (pch.py)
            env["DISTRS_KB_PCH"] = pch
            mounts = replace(mounts, ro_paths=(*mounts.ro_paths, pch))
        with self.sandbox.session(disk_bytes=2048 * MiB) as s:
            s.write_file("builder_child.py", child_files("builder_child.py")["builder_child.py"])
            r = s.run(
                [exe, "-I", "-B", "builder_child.py"],
                limits=build_limits(self._settings, left),
                stdin=json.dumps(args).encode(),
                env=env,
                mounts=mounts,
            )
            if r.timed_out:
                raise BuildTimeout
            last = _last_json(r.stdout)
            if not last:
                raise SandboxError(f"kernel builder failed: {r.describe()}: {snippet(r.stderr, 2000)}")
            if not last.get("ok"):
                return BuildError(str(last.get("message", "build failed")))
            data = s.read_file("out.so", MAX_BINARY_BYTES)
            if data is None:
                return BuildError(f"the built module is missing or larger than {MAX_BINARY_BYTES} bytes")
            return Built(str(last["module"]), data)


class BuildTimeout(Exception):
    pass


def _last_json(stdout: bytes) -> dict[str, Any]:
    """The JSON object on a child's last stdout line ({} where there is none)."""
    try:
        last = json.loads(stdout.decode(errors="replace").strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {}
    return last if isinstance(last, dict) else {}
