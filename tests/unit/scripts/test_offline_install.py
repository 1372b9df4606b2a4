"""The GPU check's offline install (scripts/offline_install.py): which prepared wheels go into the
folder for a machine's own python, and a real install of pure-Python wheels with no index."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

from scripts import offline_install as oi

PY312 = {"cp312-cp312-manylinux_2_17_x86_64", "py3-none-any", "cp312-abi3-manylinux_2_17_x86_64"}


def wheels(*names: str) -> list[oi.Wheel]:
    out = [oi.parse_wheel(f"/w/{n}") for n in names]
    assert all(w is not None for w in out)
    return [w for w in out if w is not None]


def no_requires(path: str) -> list[str]:
    return []


def test_wheel_names_are_read_as_pep_427_says() -> None:
    w = oi.parse_wheel("/w/pydantic_core-2.33.2-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl")
    assert w is not None and (w.name, w.version) == ("pydantic-core", "2.33.2")
    assert w.tags == {"cp312-cp312-manylinux_2_17_x86_64", "cp312-cp312-manylinux2014_x86_64"}
    built = oi.parse_wheel("/w/Distrs_Client-0.1.0-1build-py3-none-any.whl")
    assert built is not None and built.name == "distrs-client" and built.tags == {"py3-none-any"}
    assert oi.parse_wheel("/w/not-a-wheel.tar.gz") is None


def test_only_what_this_python_lacks_goes_in_and_the_projects_own_always() -> None:
    ws = wheels(
        "distrs-0.1.0-py3-none-any.whl",
        "distrs_client-0.1.0-py3-none-any.whl",
        "numpy-2.3.0-cp312-cp312-manylinux_2_17_x86_64.whl",
        "fastapi-0.115.0-py3-none-any.whl",
        "orjson-3.10.0-cp311-cp311-manylinux_2_17_x86_64.whl",  # for another python
    )
    installed = {"numpy": "2.5.2", "distrs": "0.0.9", "torch": "2.11.0"}
    p = oi.plan(ws, installed, PY312, requires_of=no_requires)
    assert [w.name for w in p.install] == ["distrs", "distrs-client", "fastapi"]
    assert p.provided == {"numpy": "2.5.2"}  # the machine's numpy, built against its torch, stays
    assert p.incompatible == ["orjson-3.10.0-cp311-cp311-manylinux_2_17_x86_64.whl"]
    assert oi.plan(ws, installed, None, requires_of=no_requires).incompatible == []


def test_the_newest_of_several_versions_is_taken() -> None:
    ws = wheels(
        "rich-13.10.0-py3-none-any.whl", "rich-13.9.4-py3-none-any.whl", "distrs-0.1.0-py3-none-any.whl"
    )
    p = oi.plan(ws, {}, PY312, requires_of=no_requires)
    assert [f"{w.name}=={w.version}" for w in p.install] == ["distrs==0.1.0", "rich==13.10.0"]
    assert p.superseded == ["rich-13.9.4-py3-none-any.whl"]


def test_a_version_the_machine_has_that_a_wheel_cannot_use_is_replaced_where_a_fitting_wheel_is_here() -> (
    None
):
    ws = wheels(
        "distrs-0.1.0-py3-none-any.whl",
        "fastapi-0.115.0-py3-none-any.whl",
        "starlette-0.46.0-py3-none-any.whl",
        "anyio-4.9.0-py3-none-any.whl",
    )
    reqs = {
        "/w/distrs-0.1.0-py3-none-any.whl": [
            "fastapi>=0.115",
            "ortools>=9.10",
            'uvloop; sys_platform == "win32"',
        ],
        "/w/fastapi-0.115.0-py3-none-any.whl": [
            "starlette<0.47,>=0.40",
            "typing-extensions>=4.8",
            "anyio>=3",
        ],
        "/w/starlette-0.46.0-py3-none-any.whl": ["anyio<5,>=3.6.2", "httpx>=0.27; extra == 'full'"],
        "/w/anyio-4.9.0-py3-none-any.whl": [],
    }
    installed = {"starlette": "0.30.0", "anyio": "4.11.0", "typing-extensions": "4.2.0", "uvloop": "0.1"}
    p = oi.plan(ws, installed, PY312, requires_of=lambda path: reqs[path])
    names = [w.name for w in p.install]
    assert names == ["distrs", "fastapi", "starlette"]  # anyio 4.11 fits, so the machine's stays
    assert p.replaced == ["starlette<0.47,>=0.40 (this python has 0.30.0)"]
    assert p.unsatisfied == ["typing-extensions>=4.8 (this python has 4.2.0)"]  # no wheel here to fix it
    assert p.provided == {"anyio": "4.11.0"}


def make_wheel(folder: Path, name: str, module: str, requires: list[str] = ()) -> Path:  # type: ignore[assignment]
    path = folder / f"{name}-1.0-py3-none-any.whl"
    dist = f"{name}-1.0.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{module}/__init__.py", f"NAME = {name!r}\n")
        z.writestr(f"{dist}/METADATA", meta)
        z.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{dist}/entry_points.txt", f"[distrs.rewards]\n{module} = {module}:NAME\n")
        z.writestr(f"{dist}/RECORD", "")
    return path


def test_installs_into_a_folder_with_no_index_and_reports_what_it_did(tmp_path: Path) -> None:
    wheel_dir, site = tmp_path / "wheels", tmp_path / "site"
    wheel_dir.mkdir()
    make_wheel(wheel_dir, "distrs", "fake_distrs", ["pytest>=1"])
    make_wheel(wheel_dir, "distrs_client", "fake_distrs_client")
    make_wheel(wheel_dir, "pytest", "fake_pytest")  # this python has pytest: left out
    report = tmp_path / "install.json"
    args = ["--wheels", str(wheel_dir), "--target", str(site), "--report", str(report)]
    r = subprocess.run(
        [sys.executable, oi.__file__, *args, "--note", "bubblewrap from .deb"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    got = json.loads(report.read_text())
    assert (
        got["installed"] == ["distrs==1.0", "distrs-client==1.0"]
        and "pytest" in got["provided_by_this_python"]
    )
    assert got["notes"] == ["bubblewrap from .deb"] and got["python"] == sys.executable
    assert (site / "fake_distrs" / "__init__.py").exists() and not (site / "fake_pytest").exists()
    # the entry points are found from the folder on PYTHONPATH
    code = "from importlib.metadata import entry_points; print(sorted(e.name for e in entry_points(group='distrs.rewards')))"
    out = subprocess.run(
        [sys.executable, "-c", code], env={"PYTHONPATH": str(site)}, capture_output=True, text=True
    )
    assert "fake_distrs" in out.stdout and "fake_distrs_client" in out.stdout, out.stderr


def test_refuses_to_go_on_without_the_projects_own_wheels(tmp_path: Path) -> None:
    (tmp_path / "wheels").mkdir()
    make_wheel(tmp_path / "wheels", "fastapi", "fake_fastapi")
    r = subprocess.run(
        [
            sys.executable,
            oi.__file__,
            "--wheels",
            str(tmp_path / "wheels"),
            "--target",
            str(tmp_path / "site"),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "distrs, distrs-client" in r.stderr
