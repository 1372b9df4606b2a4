"""Runs inside an execute jail: one KernelBench model, driven step by step by the host.

Run as ``python -I -B run_child.py``. The host starts two of these per request, each in its own
jail: the *reference* (``Model`` of ``reference.py``) and the *candidate* (``ModelNew`` of
``candidate.py``, whose ``load_inline`` calls load the modules the compile stage shipped instead
of building: a call the compile stage did not build fails). The candidate never shares a
process, a memory space or a seed with the reference, so it cannot read the reference's freed
output, change the reference's inputs or learn the seeds ahead of time; the host compares the
outputs itself (``harness.py``).

Protocol: one JSON command per line on stdin; each reply is one JSON line on stdout, followed by
``nbytes`` raw bytes where the reply says so (tensor data, C order). Commands::

    init  {role, device, precision, seed, threads, modules?}   build the model (seeded)
    trial {seed}               inputs from get_inputs() under the seed; forward; reply the outputs
    prep  {seed, a, b, p}      inputs for a timed call; digest weights; flush the L2 (cuda); sync
    go                         the timed call: forward, then the digest of its outputs, then sync
    output                     the outputs of the last timed call
    profile                    (cuda) the names of the GPU kernels one forward launched
    threads                    this process's thread count

The digest ``sum(out[i] * w[i])`` with ``w[i] = ((i*a + b) % p) / p`` (float64, over every
output element in order; with ``sum(|out[i]| * w[i])`` as its scale)
is computed after the call and before the reply: the host's clock stops only once the outputs
exist, whatever the model did with streams, threads or events. The candidate runs in this
process and could write to stdout itself; the host trusts nothing here beyond what it can check
(output values against the reference, digests against outputs, its own clock).

This file imports nothing of ``distrs``: it runs where only torch is importable.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import sys
import time
import traceback

ORIG_STDOUT = os.dup(1)
L2_FLUSH_BYTES = 256 << 20
DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def send(obj: dict, blob: bytes = b"") -> None:  # type: ignore[type-arg]
    if blob:
        obj = {**obj, "nbytes": len(blob)}
    data = json.dumps(obj).encode() + b"\n" + blob
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
    def __init__(self, cmd: dict) -> None:  # type: ignore[type-arg]
        import torch

        self.torch = torch
        self.role = cmd["role"]
        self.device = torch.device(cmd["device"])
        self.dtype = getattr(torch, DTYPES[cmd["precision"]])
        torch.set_num_threads(int(cmd.get("threads", 1)))
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
        self.inputs: list = []  # type: ignore[type-arg]
        self.last: list = []  # type: ignore[type-arg]
        self.numel = 0
        self.digest_args = (1, 0, 1)
        self.flush = (
            torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.float32, device=self.device)
            if self.device.type == "cuda"
            else None
        )

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

    def make_inputs(self, seed: int) -> None:
        self._seed(seed)
        self.inputs = [self._to(x) for x in self.get_inputs()]

    def forward(self) -> list:  # type: ignore[type-arg]
        out = self.model(*self.inputs)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        return outs

    def check_outputs(self, outs: list) -> str | None:  # type: ignore[type-arg]
        torch = self.torch
        inputs = [x for x in self.inputs if isinstance(x, torch.Tensor)]
        for i, o in enumerate(outs):
            if type(o) is not torch.Tensor:
                return (
                    f"output {i} is a {type(o).__module__}.{type(o).__qualname__}, not a plain torch.Tensor"
                )
            if o.device != self.device:
                return f"output {i} is on {o.device}, not {self.device}"
            ptr = o.untyped_storage().data_ptr()
            if ptr and any(ptr == x.untyped_storage().data_ptr() for x in inputs):
                return f"output {i} shares memory with an input"
        return None

    def blob(self, outs: list) -> tuple[list, bytes]:  # type: ignore[type-arg]
        torch = self.torch
        meta, parts = [], []
        for o in outs:
            c = o.detach().to("cpu").contiguous()
            data = c.reshape(-1).view(torch.uint8).numpy().tobytes() if c.numel() else b""
            meta.append(
                {"dtype": str(c.dtype).removeprefix("torch."), "shape": list(c.shape), "nbytes": len(data)}
            )
            parts.append(data)
        return meta, b"".join(parts)

    def trial(self, cmd: dict) -> None:  # type: ignore[type-arg]
        self.make_inputs(int(cmd["seed"]))
        before = Counted.calls
        outs = self.forward()
        self.sync()
        bad = self.check_outputs(outs)
        if bad is not None:
            send({"ok": False, "kind": "bad_output", "error": bad})
            return
        meta, data = self.blob(outs)
        send({"ok": True, "tensors": meta, "calls": Counted.calls - before}, data)

    def prep(self, cmd: dict) -> None:  # type: ignore[type-arg]
        self.make_inputs(int(cmd["seed"]))
        self.digest_args = (int(cmd["a"]), int(cmd["b"]), int(cmd["p"]))
        if self.flush is not None:
            self.flush.zero_()
        self.sync()
        send({"ok": True})

    def digest(self, outs: list):  # type: ignore[no-untyped-def,type-arg]
        torch = self.torch
        a, b, p = self.digest_args
        flat = torch.cat([o.detach().reshape(-1).to(torch.float64) for o in outs])
        idx = torch.arange(flat.numel(), device=flat.device, dtype=torch.int64)
        w = ((idx * a + b) % p).to(torch.float64) / p
        self.numel = flat.numel()
        return torch.stack([(flat * w).sum(), (flat.abs() * w).sum()])

    def go(self) -> None:
        torch = self.torch
        before = Counted.calls
        if self.device.type == "cuda":
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            outs = self.forward()
            end.record()
            d = self.digest(outs)
            self.sync()
            inner_ms = start.elapsed_time(end)
        else:
            t0 = time.perf_counter()
            outs = self.forward()
            inner_ms = (time.perf_counter() - t0) * 1e3
            d = self.digest(outs)
        digest, scale = (float(v) for v in d.tolist())
        bad = self.check_outputs(outs)
        if bad is not None:
            send({"ok": False, "kind": "bad_output", "error": bad})
            return
        self.last = outs
        send(
            {
                "ok": True,
                "digest": digest,
                "scale": scale,
                "numel": self.numel,
                "inner_ms": inner_ms,
                "calls": Counted.calls - before,
            }
        )

    def output(self) -> None:
        meta, data = self.blob(self.last)
        send({"ok": True, "tensors": meta}, data)

    def profile(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            self.forward()
            self.sync()
        names = sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})
        send({"ok": True, "kernels": names[:200]})

    def threads(self) -> None:
        send(
            {
                "ok": True,
                "threads": len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else -1,
            }
        )


def versions(runner: Runner) -> dict:  # type: ignore[type-arg]
    torch = runner.torch
    out = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": sys.version.split()[0]}
    if runner.device.type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(runner.device)
        out["capability"] = ".".join(map(str, torch.cuda.get_device_capability(runner.device)))
    return out


def error_kind(e: BaseException) -> str:
    text = str(e)
    if "CUDA error" in text or "cudaError" in text or "illegal memory access" in text:
        return "cuda"
    if isinstance(e, MemoryError) or "out of memory" in text:
        return "memory"
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
            if name == "trial":
                runner.trial(cmd)
            elif name == "prep":
                runner.prep(cmd)
            elif name == "go":
                runner.go()
            elif name == "output":
                runner.output()
            elif name == "profile":
                runner.profile()
            elif name == "threads":
                runner.threads()
            elif name == "exit":
                return 0
            else:
                send({"ok": False, "kind": "protocol", "error": f"unknown command {name!r}"})
        except BaseException as e:  # the model's failure: reported, then the host decides
            send({"ok": False, "kind": error_kind(e), "error": traceback.format_exc(limit=6)[-4000:]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
