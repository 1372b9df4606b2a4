"""Runs inside a clean build jail: one ``load_inline`` call, and nothing of the candidate.

Run as ``python -I -B builder_child.py`` with the call's canonical arguments (JSON) on stdin.
No candidate code runs in this process: the module it builds is a pure function of the call's
arguments and the toolchain, so the host may cache it by the call's key and ship it to any
request that makes the same call (``compile.py``). The built module is copied to ``out.so``.

Where the host mounted a precompiled ``torch/extension.h`` (``DISTRS_KB_PCH``: a directory
holding ``torch/extension.h`` and its ``.gch``), that directory goes first on the include
path: g++ then loads the precompiled header for the ``#include <torch/extension.h>`` that opens
the generated ``main.cpp`` instead of parsing torch's headers again, provided the header was
precompiled with the same flags; otherwise g++ ignores it and parses as usual, so the module is
the same either way.

``python -I -B builder_child.py --pch`` with the extra C++ flags (JSON list) on stdin precompiles
``torch/extension.h`` with the flags torch uses for ``main.cpp`` into ``extension.h.gch`` (beside
a copy of the header, ``extension.h``) in the work dir.

Its last stdout line is ``{"ok": true, ...}`` or ``{"ok": false, "message": ...}`` (the
compiler's output is in torch's exception message). Standard library and torch only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig


def pch_flags(extra_cflags: list[str]) -> list[str]:
    """The flags torch's generated build gives ``main.cpp`` (less the module's own name)."""
    import torch.utils.cpp_extension as ce

    include = [f"-isystem{p}" for p in ce.include_paths()] + [f"-isystem{sysconfig.get_path('include')}"]
    return ["-DTORCH_API_INCLUDE_EXTENSION_H", *include, "-fPIC", "-std=c++20", *extra_cflags]


def precompile(extra_cflags: list[str]) -> dict[str, object]:
    import torch.utils.cpp_extension as ce

    header = os.path.join(ce.include_paths()[0], "torch", "extension.h")
    shutil.copyfile(header, "extension.h")
    cxx = os.environ.get("CXX", "c++")
    cmd = [cxx, "-x", "c++-header", "extension.h", "-o", "extension.h.gch", *pch_flags(extra_cflags)]
    # stdin: none (g++ reads a file named "" as its stdin, which here is the host's request, at EOF)
    r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if r.returncode != 0:
        return {"ok": False, "message": (r.stderr or r.stdout)[-4000:]}
    return {"ok": True}


def main() -> int:
    if sys.argv[1:2] == ["--pch"]:
        print("\n" + json.dumps(precompile(json.loads(sys.stdin.read() or "[]"))))
        return 0
    args = json.loads(sys.stdin.read())
    if not isinstance(args, dict):
        print(json.dumps({"ok": False, "message": "arguments must be an object"}))
        return 0
    import torch.utils.cpp_extension as ce

    pch = os.environ.get("DISTRS_KB_PCH")
    if pch and os.path.exists(os.path.join(pch, "torch", "extension.h.gch")):
        args = {**args, "extra_include_paths": [pch, *(args.get("extra_include_paths") or [])]}
    os.makedirs("build", exist_ok=True)
    try:
        mod = ce.load_inline(**args, build_directory=os.path.abspath("build"), verbose=False)
    except Exception as e:
        print("\n" + json.dumps({"ok": False, "message": str(e)[-20000:]}))
        return 0
    shutil.copyfile(mod.__file__, "out.so")
    print("\n" + json.dumps({"ok": True, "module": mod.__name__}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
