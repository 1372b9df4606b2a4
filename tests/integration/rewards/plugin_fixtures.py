"""Plugin packages for the tests: the documented example (docs/examples/reward-plugin) made
discoverable as an installed distribution, and a module of misbehaving plugins."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "docs" / "examples" / "reward-plugin"

BAD_PLUGINS = """
import sys, time

def boom(payload):
    raise RuntimeError("plugin bug on " + str(payload.get("completion")))

def hang(payload):
    while True:
        time.sleep(0.01)

def garbage(payload):
    return "one"

def forge(payload):
    print('{"ok": true, "result": 1.0}')  # goes to stderr, cannot forge the reply
    return 0.0

def secret(payload):
    import os
    return {"score": 0.0, "detail": {"env": sorted(k for k in os.environ if k.startswith("DISTRS_"))}}

def shout(payload):
    return {"score": 1.0, "detail": {"text": str(payload["completion"]).upper()}}

PLANTED = []

def leave(payload):
    import os, signal, subprocess
    if payload["plant"]:
        PLANTED.append(1)
        os.environ["DISTRS_PLANTED"] = "1"
        for d in (".", "/tmp"):
            with open(os.path.join(d, "planted"), "w") as f:
                f.write("x")
        subprocess.Popen(
            [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
             "time.sleep(600)"],
            start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
    seen = {"global": bool(PLANTED), "env": "DISTRS_PLANTED" in os.environ,
            "work": os.path.exists("planted"), "tmp": os.path.exists("/tmp/planted")}
    return {"score": 1.0, "detail": {"seen": seen}}

def flood(payload):
    sys.stdout = sys.__stdout__
    sys.stdout.write("x" * (8 << 20))
    return 1.0
"""


def install(root: Path) -> Path:
    """A directory that, on ``sys.path`` / ``PYTHONPATH``, holds the example distribution's
    metadata (its entry points) and the ``bad_plugins`` module; world-readable for the jail."""
    root.mkdir(parents=True, exist_ok=True)
    dist = root / "distrs_example_reward-0.1.0.dist-info"
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: distrs-example-reward\nVersion: 0.1.0\n")
    eps = (EXAMPLE / "pyproject.toml").read_text().split('[project.entry-points."distrs.rewards"]')[1]
    lines = [ln.replace('"', "") for ln in eps.strip().splitlines() if "=" in ln]
    (dist / "entry_points.txt").write_text("[distrs.rewards]\n" + "\n".join(lines) + "\n")
    (root / "bad_plugins.py").write_text(BAD_PLUGINS)
    for p in (root, dist, *root.iterdir(), *dist.iterdir()):
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    return root
