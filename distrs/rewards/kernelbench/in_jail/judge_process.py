"""Runs inside an execute jail: one KernelBench model, driven step by step by the host.

Run as ``python -I -B judge_process.py``. The host starts two of these per request, each in its own
jail: the *reference* (``Model`` of ``reference.py``) and the *candidate* (``ModelNew`` of
``candidate.py``, whose ``load_inline`` calls load the modules the compile stage shipped instead
of building: a call the compile stage did not build fails). The candidate never shares a
process, a memory space or a seed with the reference, so it cannot read the reference's freed
output, change the reference's inputs or learn the seeds ahead of time.

Outputs stay on the device. The reference's process compares them (``tensors.py``): the
candidate copies its outputs, one chunk at a time, into the output window (a sealed memory file
the host created, ``window.py``; the candidate's descriptor is writable, the reference's
read-only), and the reference compares each chunk with its own, on its own device. Inputs are
made from the host's secret seed by the problem's ``get_inputs()`` on the device itself where it
allows (``torch.device`` as the default device), else on the CPU and moved.

Protocol: one JSON command per line on stdin; each reply is one JSON line on stdout::

    init    {role, device, precision, threads, window: {fd, size, slot_bytes}}   the harness
                              alone: torch, the device, the window (no problem code has run)
    load    {seed, modules?}  the problem and the model: the reference's, or the candidate's
                              (its shipped modules replayed for load_inline)
    trial   {seed, inputs}   inputs from get_inputs() under the seed ("auto": on the device if
                              it allows, the reply says where); forward; the outputs are kept
    put     {out, start, count, slot}           (candidate) a chunk of its kept output i
    cmp     {out, start, count, slot, dtype, atol, rtol, a?, b?, p?}
                                                (reference) that chunk against its own; with
                                                a, b, p also the chunk's digest and scale
    prep    {seed, inputs, a, b, p}   inputs for a timed call; digest weights; flush the L2; sync
    go                                the timed call: forward, its digest, a device-wide sync
    trim                              return cached device memory (after a timed call)
    release                           drop inputs and outputs, return cached device memory
    memory                            free and total device memory (or host memory on the CPU)
    profile                           (cuda) names of the GPU kernels one forward launched
    threads                           this process's thread count

The digest is computed after the call and before the reply: the host's clock stops only once
the outputs exist, whatever the model did with streams, threads or events. The candidate runs
in this process and could write to stdout itself; the host trusts nothing of the candidate's
process beyond what it can check (its outputs, compared by the reference; digests against
outputs; its own clock).

This file imports nothing of ``distrs``: it runs where only torch is importable.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import json
import os
import resource
import sys
import time
import traceback
from typing import Any

ORIG_STDOUT = os.dup(1)
L2_FLUSH_BYTES = 256 << 20
DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def send(obj: dict) -> None:  # type: ignore[type-arg]
    data = json.dumps(obj).encode() + b"\n"
    view = memoryview(data)
    while view:
        n = os.write(ORIG_STDOUT, view)
        view = view[n:]


def load_module(name: str, path: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(name, os.path.abspath(path))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


class Counted:
    """A shipped extension module whose functions count their calls (proof the kernel ran)."""

    calls = 0

    def __init__(self, mod) -> None:  # type: ignore[no-untyped-def]
        object.__setattr__(self, "_mod", mod)

    def __getattr__(self, attr):  # type: ignore[no-untyped-def]
        value = getattr(object.__getattribute__(self, "_mod"), attr)
        if not callable(value):
            return value

        def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
            Counted.calls += 1
            return value(*args, **kwargs)

        return counted


def install_replay(modules: list[dict]) -> None:  # type: ignore[type-arg]
    """load_inline loads the shipped module with the same call key; nothing is ever built here."""
    import torch.utils.cpp_extension as ce

    callkey = load_module("_kb_callkey", "callkey.py")
    real = ce.load_inline
    by_key = {m["key"]: m for m in modules}

    def replay_load_inline(*args, **kwargs):  # type: ignore[no-untyped-def]
        m = by_key.get(callkey.call_key(callkey.canonical_args(real, args, kwargs)))
        if m is None:
            raise RuntimeError(
                "the candidate called load_inline with arguments the compile stage did not build "
                "(nothing is compiled at execute)"
            )
        loader = importlib.machinery.ExtensionFileLoader(m["module"], os.path.abspath(m["file"]))
        spec = importlib.util.spec_from_file_location(m["module"], os.path.abspath(m["file"]), loader=loader)
        assert spec is not None
        mod = importlib.util.module_from_spec(spec)
        loader.exec_module(mod)
        return Counted(mod)

    def refused(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise RuntimeError("nothing is compiled at execute")

    ce.load_inline = replay_load_inline
    ce.load = refused
    ce._jit_compile = refused  # type: ignore[attr-defined]


class Runner:
    """The harness's own setup (``init``): torch, the device, the window, the flush buffer.

    Nothing of the problem or the candidate has run when ``init`` replies, so its failure is the
    service's, whoever's process it is; the models come with ``load``."""

    def __init__(self, cmd: dict) -> None:  # type: ignore[type-arg]
        import torch

        self.torch = torch
        self.t = load_module("_kb_tensors", "tensors.py")
        self.role = cmd["role"]
        self.device = self.t.resolve_device(cmd["device"])
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        self.dtype = getattr(torch, DTYPES[cmd["precision"]])
        torch.set_num_threads(int(cmd.get("threads", 1)))
        w = cmd["window"]
        self.window = self.t.Window(
            int(w["fd"]), int(w["size"]), int(w["slot_bytes"]), writable=self.role == "candidate"
        )
        if self.device.type == "cuda":
            self.window.pin(read_only=self.role != "candidate")
        self.model: Any = None
        self.get_inputs: Any = None
        self.inputs: list = []  # type: ignore[type-arg]
        self.last: list = []  # type: ignore[type-arg]  # the kept outputs, flattened
        self.numel = 0
        self.digest_args = (1, 0, 1)
        self.flush = (
            torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.float32, device=self.device)
            if self.device.type == "cuda"
            else None
        )

    def load(self, cmd: dict) -> None:  # type: ignore[type-arg]
        """The problem, and the model this process judges (the candidate's from here on)."""
        if self.role == "candidate":
            install_replay(cmd.get("modules", []))
        ref = load_module("reference", "reference.py")
        self.get_inputs = ref.get_inputs
        seed = int(cmd["seed"])
        self._seed(seed)
        init_inputs = [self._to(x) for x in ref.get_init_inputs()]
        cls = load_module("candidate", "candidate.py").ModelNew if self.role == "candidate" else ref.Model
        self._seed(seed)
        self.model = cls(*init_inputs).to(device=self.device, dtype=self.dtype)
        send({"ok": True})

    def _seed(self, seed: int) -> None:
        self.torch.manual_seed(seed)
        if self.device.type == "cuda":
            self.torch.cuda.manual_seed_all(seed)

    def _to(self, x):  # type: ignore[no-untyped-def]
        if isinstance(x, self.torch.Tensor):
            if x.is_floating_point():
                return x.to(device=self.device, dtype=self.dtype)
            return x.to(device=self.device)
        return x

    def sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def release(self, *, cached: bool = True) -> None:
        """Drop inputs and outputs; with ``cached``, also hand the allocator's cached blocks back
        to the device (what the other process can then get), not between timed calls."""
        self.inputs, self.last = [], []
        if cached and self.device.type == "cuda":
            self.torch.cuda.empty_cache()

    def trim(self) -> None:
        """Return the allocator's cached blocks (the dropped inputs of the last call) to the
        device, outside the timed window: the other process's next call may need them."""
        if self.device.type == "cuda":
            self.torch.cuda.empty_cache()
        send({"ok": True})

    def release_and_reply(self) -> None:
        self.release()
        send({"ok": True})

    def make_inputs(self, seed: int, where: str) -> str:
        """Inputs from the seed: on the device (``where`` "device", or "auto" where it works),
        else on the CPU and moved. Returns where they were made."""
        self.release(cached=False)
        if where in ("auto", "device") and self.device.type != "cpu":
            self._seed(seed)
            try:
                with self.device:
                    self.inputs = [self._to(x) for x in self.get_inputs()]
                return "device"
            except Exception:
                if where == "device":
                    raise
                self.release(cached=False)
        self._seed(seed)
        self.inputs = [self._to(x) for x in self.get_inputs()]
        return "host"

    def forward(self) -> list:  # type: ignore[type-arg]
        out = self.model(*self.inputs)
        return list(out) if isinstance(out, (tuple, list)) else [out]

    def check_outputs(self, outs: list) -> str | None:  # type: ignore[type-arg]
        torch = self.torch
        inputs = [x for x in self.inputs if isinstance(x, torch.Tensor)]
        for i, o in enumerate(outs):
            if type(o) is not torch.Tensor:
                return (
                    f"output {i} is a {type(o).__module__}.{type(o).__qualname__}, not a plain torch.Tensor"
                )
            if not self.t.same_device(o.device, self.device):
                return f"output {i} is on {o.device}, not {self.device}"
            if self.t.dtype_name(o) not in self.t.DTYPES:
                return f"output {i} has the unsupported dtype {o.dtype}"
            ptr = o.untyped_storage().data_ptr()
            if ptr and any(ptr == x.untyped_storage().data_ptr() for x in inputs):
                return f"output {i} shares memory with an input"
        return None

    def keep(self, outs: list, flats: list | None = None) -> list:  # type: ignore[type-arg]
        """Keep the outputs, flattened (a copy only where one is not contiguous); their meta."""
        self.last = flats if flats is not None else [o.detach().reshape(-1) for o in outs]
        return [
            {"dtype": self.t.dtype_name(o), "shape": list(o.shape), "numel": int(o.numel())} for o in outs
        ]

    def peak_bytes(self) -> int:
        if self.device.type == "cuda":
            return int(self.torch.cuda.max_memory_allocated(self.device))
        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024

    def trial(self, cmd: dict) -> None:  # type: ignore[type-arg]
        where = self.make_inputs(int(cmd["seed"]), str(cmd.get("inputs", "auto")))
        before = Counted.calls
        outs = self.forward()
        self.sync()
        bad = self.check_outputs(outs)
        if bad is not None:
            send({"ok": False, "kind": "bad_output", "error": bad})
            return
        meta = self.keep(outs)
        self.inputs = []
        if self.device.type == "cuda":  # what the candidate can get is measured without our cache
            self.torch.cuda.empty_cache()
        send(
            {
                "ok": True,
                "tensors": meta,
                "calls": Counted.calls - before,
                "inputs": where,
                "peak_bytes": self.peak_bytes(),
            }
        )

    def put(self, cmd: dict) -> None:  # type: ignore[type-arg]
        start, count = int(cmd["start"]), int(cmd["count"])
        src = self.last[int(cmd["out"])][start : start + count]
        nbytes = self.window.put(int(cmd["slot"]), src)
        if src.device.type == "cuda":
            self.sync()
        send({"ok": True, "copied": nbytes})

    def cmp(self, cmd: dict) -> None:  # type: ignore[type-arg]
        start, count = int(cmd["start"]), int(cmd["count"])
        mine = self.last[int(cmd["out"])][start : start + count]
        theirs = self.window.get(int(cmd["slot"]), self.t.DTYPES[cmd["dtype"]], count, self.device)
        torch = self.torch
        threads = torch.get_num_threads()
        if self.device.type == "cpu":  # untimed work: every CPU of the jail
            torch.set_num_threads(len(os.sched_getaffinity(0)))
        try:
            stats = self.t.compare_chunk(mine, theirs, float(cmd["atol"]), float(cmd["rtol"]))
            if "a" in cmd:
                a, b, p, row = int(cmd["a"]), int(cmd["b"]), int(cmd["p"]), int(cmd["row"])
                d, s = self.t.segment_digest(theirs, row, a, b, p, scale=True)
                stats.update(digest=d, scale=s)
        finally:
            torch.set_num_threads(threads)
        send({"ok": True, **stats})

    def prep(self, cmd: dict) -> None:  # type: ignore[type-arg]
        self.make_inputs(int(cmd["seed"]), str(cmd.get("inputs", "host")))
        self.digest_args = (int(cmd["a"]), int(cmd["b"]), int(cmd["p"]))
        if self.flush is not None:
            self.flush.zero_()
        self.sync()
        send({"ok": True})

    def go(self) -> None:
        torch = self.torch
        before = Counted.calls
        a, b, p = self.digest_args
        # both sides compute the scale (only the reference's is used): their host-clock overheads
        # must stay alike, since the reference's calibrates what the candidate is charged
        want_scale = True
        if self.device.type == "cuda":
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            outs = self.forward()
            end.record()
            flats = [o.detach().reshape(-1) for o in outs]
            digest, scale = self.t.digest(flats, a, b, p, scale=want_scale)
            self.sync()
            inner_ms = start.elapsed_time(end)
        else:
            t0 = time.perf_counter()
            outs = self.forward()
            inner_ms = (time.perf_counter() - t0) * 1e3
            flats = [o.detach().reshape(-1) for o in outs]
            digest, scale = self.t.digest(flats, a, b, p, scale=want_scale)
        bad = self.check_outputs(outs)
        if bad is not None:
            send({"ok": False, "kind": "bad_output", "error": bad})
            return
        meta = self.keep(outs, flats)
        self.inputs = []
        send(
            {
                "ok": True,
                "tensors": meta,
                "digest": digest,
                "scale": scale,
                "numel": sum(f.numel() for f in flats),
                "inner_ms": inner_ms,
                "calls": Counted.calls - before,
            }
        )

    def memory(self) -> None:
        if self.device.type == "cuda":
            free, total = self.torch.cuda.mem_get_info(self.device)
        else:
            free, total = host_memory()
        send({"ok": True, "free": int(free), "total": int(total), "peak_bytes": self.peak_bytes()})

    def profile(self) -> None:
        """The GPU kernels of one forward. A profiler that fails to start or to report says so
        (``kind`` profiler: the service's tool, not the model); the forward's own failure is
        the model's, as anywhere else."""

        def refused(e: BaseException) -> None:
            send({"ok": False, "kind": "profiler", "error": f"{type(e).__name__}: {e}"[-2000:]})

        try:
            from torch.profiler import ProfilerActivity, profile

            prof = profile(activities=[ProfilerActivity.CUDA])
            prof.__enter__()
        except Exception as e:
            refused(e)
            return
        try:
            self.forward()
            self.sync()
        except BaseException:
            with contextlib.suppress(Exception):
                prof.__exit__(None, None, None)
            raise
        try:
            prof.__exit__(None, None, None)
            names = sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})
        except Exception as e:
            refused(e)
            return
        send({"ok": True, "kernels": names[:200]})

    def threads(self) -> None:
        send(
            {
                "ok": True,
                "threads": len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else -1,
            }
        )


def host_memory() -> tuple[int, int]:
    """(available, total) bytes of the machine's memory, from /proc/meminfo."""
    info = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, _, v = line.partition(":")
            info[k] = int(v.split()[0]) * 1024
    return info.get("MemAvailable", 0), info.get("MemTotal", 0)


def versions(runner: Runner) -> dict:  # type: ignore[type-arg]
    torch = runner.torch
    out = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": sys.version.split()[0]}
    if runner.device.type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(runner.device)
        out["capability"] = ".".join(map(str, torch.cuda.get_device_capability(runner.device)))
    out["window_pinned"] = runner.window.pinned
    return out


def error_kind(e: BaseException) -> str:
    text = str(e)
    if "out of memory" in text or isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError":
        return "memory"
    if "CUDA error" in text or "cudaError" in text or "illegal memory access" in text:
        return "cuda"
    return "runtime"


def main() -> int:
    # Whatever the models print goes to stderr: stdout carries only this script's replies.
    os.dup2(2, 1)
    runner: Runner | None = None
    for line in sys.stdin:
        try:
            cmd = json.loads(line)
            name = cmd.get("cmd")
            if name == "init":
                runner = Runner(cmd)
                send({"ok": True, "versions": versions(runner)})
                continue
            if runner is None:
                send({"ok": False, "kind": "protocol", "error": "init first"})
                continue
            if name != "load" and runner.model is None:
                send({"ok": False, "kind": "protocol", "error": "load first"})
                continue
            handler = COMMANDS.get(name)
            if name == "exit":
                return 0
            if handler is None:
                send({"ok": False, "kind": "protocol", "error": f"unknown command {name!r}"})
                continue
            handler(runner, cmd)
        except BaseException as e:  # the model's failure: reported, then the host decides
            send({"ok": False, "kind": error_kind(e), "error": traceback.format_exc(limit=6)[-4000:]})
    return 0


COMMANDS = {
    "load": Runner.load,
    "trial": Runner.trial,
    "put": Runner.put,
    "cmp": Runner.cmp,
    "prep": Runner.prep,
    "go": lambda r, c: r.go(),
    "release": lambda r, c: r.release_and_reply(),
    "trim": lambda r, c: r.trim(),
    "memory": lambda r, c: r.memory(),
    "profile": lambda r, c: r.profile(),
    "threads": lambda r, c: r.threads(),
}


if __name__ == "__main__":
    sys.exit(main())
