"""Install the GPU check's prepared wheels for this machine's own python, with no registry.

A GPU machine's python often lives in a virtual environment of its own that holds torch (its
``sys.prefix`` is that environment). A new environment made from it, even with
``--system-site-packages``, sees the base interpreter's packages, not that environment's, so
torch would be missing there. So nothing new is made: the wheels that ``gpu-check-prepare.sh``
downloaded go into a plain folder (``pip install --no-index --no-deps --target DIR``) and the
check runs this same python with ``PYTHONPATH=checkout:checkout/trainer_client:DIR``; the
checkout comes first, so the code judged is the checkout's, and the project's own wheels
(``distrs``, ``distrs-client``) are installed for their metadata: the entry points of
``distrs.rewards`` that name the reward types.

A wheel is installed only where this python lacks its project: what the machine already has
(numpy, scipy, pytest, ... built against its torch) is kept, unless a wheel being installed
requires a version of it the machine does not have and the folder holds one that fits (then
that one goes in too, and the report says so). The project's own wheels always go in. Wheels
for another python or platform are left out, and of several versions of a project the newest
is taken. Run it without the target folder on
``PYTHONPATH``, so that what this python has is read, not what an earlier run installed::

    python3 scripts/offline_install.py --wheels .gpucheck/wheels --target /tmp/site --report install.json
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

OWN = ("distrs", "distrs-client")  # always installed: their entry points and metadata
WHEEL = re.compile(
    r"^(?P<name>[^-]+)-(?P<version>[^-]+)(?:-(?P<build>\d[^-]*))?-(?P<tags>[^-]+-[^-]+-[^-]+)\.whl$"
)


def canonical(name: str) -> str:
    """A project name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Wheel:
    path: str
    name: str  # canonical
    version: str
    tags: frozenset[str]  # "py3-none-any" and the like, compressed sets expanded


def parse_wheel(path: str) -> Wheel | None:
    """The project, version and tags a wheel's file name declares (PEP 427); None if it is none."""
    m = WHEEL.match(Path(path).name)
    if m is None:
        return None
    py, abi, plat = m.group("tags").split("-")
    tags = frozenset(f"{a}-{b}-{c}" for a in py.split(".") for b in abi.split(".") for c in plat.split("."))
    return Wheel(path, canonical(m.group("name")), m.group("version"), tags)


def _version_key(v: str) -> Any:
    try:
        from packaging.version import Version

        return (0, Version(v))
    except Exception:  # no packaging, or not a PEP 440 version: compare the numbers in it
        return (1, tuple(int(x) for x in re.findall(r"\d+", v)))


@dataclass(frozen=True)
class Plan:
    install: list[Wheel]
    provided: dict[str, str]  # project -> the version this python already has
    incompatible: list[str]  # wheel files for another python or platform
    superseded: list[str]  # older versions of a project also present
    replaced: list[str]  # the machine's versions a wheel being installed cannot use
    unsatisfied: list[str]  # such requirements no wheel here fits


def requires(path: str) -> list[str]:
    """The ``Requires-Dist`` lines of a wheel (its ``METADATA``)."""
    with zipfile.ZipFile(path) as z:
        name = next((n for n in z.namelist() if n.endswith(".dist-info/METADATA")), None)
        text = z.read(name).decode(errors="replace") if name else ""
    return [ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("Requires-Dist:")]


def unmet(req: str, have: dict[str, str]) -> tuple[str, str] | None:
    """(project, why) where ``req`` applies here and the version in ``have`` does not satisfy it;
    None where it is met, does not apply (a marker, an extra) or cannot be read."""
    try:
        from packaging.requirements import Requirement
        from packaging.version import Version

        r = Requirement(req)
        if r.marker is not None and not r.marker.evaluate({"extra": ""}):
            return None
        name = canonical(r.name)
        if name in have and r.specifier and not r.specifier.contains(Version(have[name]), prereleases=True):
            return name, f"{req} (this python has {have[name]})"
    except Exception:
        return None
    return None


def plan(
    wheels: list[Wheel],
    installed: dict[str, str],
    supported: set[str] | None,
    own: tuple[str, ...] = OWN,
    requires_of: Any = requires,
) -> Plan:
    """Which wheels to install (see the module docstring). ``installed``: canonical project ->
    version this python has; ``supported``: its wheel tags (None: take every wheel);
    ``requires_of``: a wheel's requirements (its path -> ``Requires-Dist`` lines)."""
    fit = [w for w in wheels if supported is None or w.tags & supported]
    incompatible = sorted(Path(w.path).name for w in wheels if w not in fit)
    newest: dict[str, Wheel] = {}
    for w in fit:
        if w.name not in newest or _version_key(w.version) > _version_key(newest[w.name].version):
            newest[w.name] = w
    superseded = sorted(Path(w.path).name for w in fit if newest[w.name] is not w)
    own_names = {canonical(n) for n in own}
    chosen = {n for n in newest if n in own_names or n not in installed}
    replaced: list[str] = []
    unsatisfied: list[str] = []
    todo = sorted(chosen)
    while todo:  # requirements of what goes in, against what stays
        name = todo.pop()
        for req in requires_of(newest[name].path):
            have = {n: v for n, v in installed.items() if n not in chosen}
            have.update({n: newest[n].version for n in chosen})
            hit = unmet(req, have)
            if hit is None:
                continue
            dep, why = hit
            if dep not in chosen and dep in newest and unmet(req, {dep: newest[dep].version}) is None:
                chosen.add(dep)
                todo.append(dep)
                replaced.append(why)
            elif why not in unsatisfied:
                unsatisfied.append(why)
    install = [newest[n] for n in sorted(chosen)]
    provided = {n: installed[n] for n in sorted(newest) if n not in chosen and n in installed}
    return Plan(install, provided, incompatible, superseded, replaced, unsatisfied)


def installed_projects() -> dict[str, str]:
    """Every project this python can import, canonical name -> version."""
    out: dict[str, str] = {}
    for d in metadata.distributions():
        name = d.metadata["Name"]
        if name:
            out.setdefault(canonical(name), d.version)
    return out


def supported_tags() -> set[str] | None:
    try:
        from packaging.tags import sys_tags
    except ImportError:
        return None
    return {str(t) for t in sys_tags()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--wheels", type=Path, required=True)
    ap.add_argument("--target", type=Path, required=True)
    ap.add_argument("--report", type=Path, default=None)
    ap.add_argument("--note", action="append", default=[], help="a line for the report (repeatable)")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    wheels = [w for p in sorted(args.wheels.glob("*.whl")) if (w := parse_wheel(str(p))) is not None]
    p = plan(wheels, installed_projects(), supported_tags())
    missing_own = [n for n in OWN if canonical(n) not in {w.name for w in p.install}]
    rc = 0
    pip_tail = ""
    if missing_own:
        rc, pip_tail = 2, f"the project's own wheels are missing from {args.wheels}: {', '.join(missing_own)}"
    elif p.install:
        cmd = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-index"]
        cmd += ["--no-deps", "--no-compile", "--upgrade", "--target", str(args.target)]
        r = subprocess.run([*cmd, *(w.path for w in p.install)], capture_output=True, text=True)
        rc, pip_tail = r.returncode, (r.stderr or r.stdout)[-3000:]
    report = {
        "rc": rc,
        "seconds": round(time.monotonic() - t0, 2),
        "python": sys.executable,
        "prefix": sys.prefix,
        "base_prefix": sys.base_prefix,
        "target": str(args.target),
        "installed": [f"{w.name}=={w.version}" for w in p.install],
        "provided_by_this_python": p.provided,
        "incompatible": p.incompatible,
        "superseded": p.superseded,
        "replaced": p.replaced,
        "unsatisfied": p.unsatisfied,
        "notes": args.note,
        **({"pip": pip_tail} if pip_tail else {}),
    }
    if args.report is not None:
        args.report.write_text(json.dumps(report, indent=2) + "\n")
    print(
        f"[offline-install] {len(p.install)} wheels into {args.target}, {len(p.provided)} provided by "
        f"{sys.prefix}, {len(p.incompatible)} for another python: rc {rc}",
        file=sys.stderr,
    )
    if pip_tail and rc:
        print(pip_tail, file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
