"""Runs inside the compile jail: import the candidate as KernelBench does, with builds by the host.

Run as ``python -I -B import_candidate.py``; it imports torch, says ``{"ready": true}`` and waits for
``{"go": true}`` on stdin
(so the worker can start it ahead of the request, ``warm.py``), then imports the candidate's
source from ``candidate.py``. Importing the candidate runs its ``load_inline`` calls; this script
replaces ``torch.utils.cpp_extension.load_inline`` first with a stand-in that sends the call's canonical
arguments to the host and waits: the host builds the call in a clean jail of its own (or takes
it from its cache), writes the module to ``ext<N>.so`` here and answers; the stand-in loads that
module and returns it, so the candidate's import goes on as under ``load_inline``. The
candidate's code thus never runs in the process that builds a module the host caches and ships.
``load`` (sources from files) and ``is_python_module=False`` are refused.

Messages to the host are JSON lines on the original stdout (the candidate's own prints go to
stderr): ``{"build": ARGS}`` per call, then ``{"done": true, "ok": ...}`` last. The candidate
runs in this process and could forge lines; nothing it could write gains it a score (modules are
built by the host from arguments, and only the execute stage judges).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import sys
import traceback

ORIG_STDOUT = os.dup(1)


def send(obj: dict) -> None:  # type: ignore[type-arg]
    data = (json.dumps(obj) + "\n").encode()
    while data:
        data = data[os.write(ORIG_STDOUT, data) :]


def load_by_path(name: str, path: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(name, os.path.abspath(path))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def load_extension(name: str, path: str):  # type: ignore[no-untyped-def]
    loader = importlib.machinery.ExtensionFileLoader(name, os.path.abspath(path))
    spec = importlib.util.spec_from_file_location(name, os.path.abspath(path), loader=loader)
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


class BuildFailed(Exception):
    pass


def main() -> int:
    os.dup2(2, 1)
    callkey = load_by_path("_kb_callkey", "callkey.py")
    import torch.utils.cpp_extension as ce

    real = ce.load_inline
    replies = sys.stdin

    def host_load_inline(*args, **kwargs):  # type: ignore[no-untyped-def]
        canon = callkey.canonical_args(real, args, kwargs)
        if canon.get("is_python_module", True) is not True:
            raise BuildFailed("load_inline(is_python_module=False) is not supported")
        send({"build": canon})
        reply = json.loads(replies.readline() or "{}")
        if not reply.get("ok"):
            raise BuildFailed(str(reply.get("message", "the build failed")))
        return load_extension(str(reply["module"]), str(reply["file"]))

    def refused_load(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise BuildFailed(
            "torch.utils.cpp_extension.load (sources from files) is not supported; use load_inline"
        )

    ce.load_inline = host_load_inline
    ce.load = refused_load
    # Started ahead of its request (warm.py): ready now; the host writes candidate.py, then says go.
    send({"ready": True})
    if json.loads(replies.readline() or "{}").get("go") is not True:
        return 0
    try:
        mod = load_by_path("candidate", "candidate.py")
    except BuildFailed as e:
        send({"done": True, "ok": False, "kind": "build", "message": str(e)})
        return 0
    except BaseException:
        send({"done": True, "ok": False, "kind": "import", "message": traceback.format_exc(limit=8)[-8000:]})
        return 0
    if not isinstance(getattr(mod, "ModelNew", None), type):
        send(
            {
                "done": True,
                "ok": False,
                "kind": "no_model_new",
                "message": "the candidate defines no class ModelNew",
            }
        )
        return 0
    send({"done": True, "ok": True})
    return 0


if __name__ == "__main__":
    sys.exit(main())
