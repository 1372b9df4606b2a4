"""Runs one reward plugin call inside the sandbox (see ``plugin``).

Standalone on purpose: it runs from a copy in a sandbox work dir, where ``distrs`` is not
importable. Reads one JSON object ``{"entry": "module:function", "payload": ..., "sys_path":
[...]}`` from stdin, calls ``function(payload)`` and writes one JSON line as the last line of
stdout: ``{"ok": true, "result": ...}`` or ``{"ok": false, "error": "..."}``. Anything the
plugin prints goes to stderr, so it cannot forge the reply line.
"""

import contextlib
import importlib
import json
import os
import sys
import traceback

# One thread per numeric library, whether started in a jail of its own or forked from a zygote
# (whose environment is the jail's default): set here, before the plugin is imported.
THREADS = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def main():
    os.environ.update(THREADS)
    real_stdout = sys.stdout
    try:
        req = json.loads(sys.stdin.read())
        for p in req.get("sys_path") or []:
            sys.path.insert(0, p)
        module_name, _, attr = req["entry"].partition(":")
        with contextlib.redirect_stdout(sys.stderr):
            fn = getattr(importlib.import_module(module_name), attr)
            result = fn(req["payload"])
        line = json.dumps({"ok": True, "result": result}, allow_nan=False)
    except Exception as e:
        tb = traceback.format_exc(limit=5)
        line = json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}"[:1000], "traceback": tb[-4000:]})
    real_stdout.write("\n" + line + "\n")
    real_stdout.flush()


if __name__ == "__main__":
    main()
