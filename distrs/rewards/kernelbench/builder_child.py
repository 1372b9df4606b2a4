"""Runs inside a clean build jail: one ``load_inline`` call, and nothing of the candidate.

Run as ``python -I -B builder_child.py`` with the call's canonical arguments (JSON) on stdin.
No candidate code runs in this process: the module it builds is a pure function of the call's
arguments and the toolchain, so the host may cache it by the call's key and ship it to any
request that makes the same call (``compile.py``). The built module is copied to ``out.so``.

Its last stdout line is ``{"ok": true, "module": NAME}`` or ``{"ok": false, "message": ...}``
(the compiler's output is in torch's exception message). Standard library and torch only.
"""

from __future__ import annotations

import json
import os
import shutil
import sys


def main() -> int:
    args = json.loads(sys.stdin.read())
    if not isinstance(args, dict):
        print(json.dumps({"ok": False, "message": "arguments must be an object"}))
        return 0
    import torch.utils.cpp_extension as ce

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
