"""Build the DistRS container images offline, from local Debian bases, with a content-hash cache.

`make images` runs this; the pod-runtime tests (tests/pods) call `build()` so that they run
exactly what users build. Steps, each skipped when its inputs did not change:

1. Bases: `scripts/mkbase.sh` (mmdebstrap) makes a Debian rootfs from `sandbox/packages/base.txt`
   plus the image's list, and it is imported as `localhost/distrs-base-<list>:<hash>`.
   Key: the package lists + mkbase.sh + suite/mirror.
2. Wheelhouse: the project's dependencies as wheels for the base's CPython (host `pip wheel`
   when the host Python has the same version, else `pip download --only-binary` for that
   version), and the project's own wheel. Key: pyproject.toml (+ extras) / the source tree.
3. Images: `sandbox/Dockerfile.<kind>` built with `--network none` (nothing is downloaded) from
   the repository root, the wheelhouse staged under `build/wheels`. Every image is labelled with
   `io.distrs.build-key` = hash(base id, Dockerfile, wheel set, source); an image carrying the
   key of the current inputs is not rebuilt.
4. Kernel images (`worker-kernels`, `worker-gpu-kernels`; not built by default): the worker
   image of their stage plus the `kernels` extra (torch, ninja) and, for the compile side, nvcc
   and the CUDA headers, all from PyPI wheels pinned with hashes in `sandbox/kernels/*.txt`.
   Those wheels (about 3 GB) are downloaded once into a wheelhouse named by the hash of the lock
   files, so a wheel set is fetched once per machine and verified against its hashes.
   `--lock-kernels` re-resolves the locks from `sandbox/kernels/*.in`.

The tool is docker (only when `docker info` answers), podman or buildah; `IMAGE_TOOL` overrides.
podman/buildah get a containers.conf (runc, cgroupfs, fixed ulimits) through CONTAINERS_CONF
unless the caller set one: the settings known to work on hosts where crun cannot manage cgroups
and raising rlimits is refused.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("DISTRS_IMAGES_CACHE", "/var/tmp/distrs-images"))
REGISTRY = os.environ.get("DISTRS_REGISTRY", "ghcr.io/distrs")
KEY_LABEL = "io.distrs.build-key"
CONTAINERS_CONF = """\
# Written by scripts/build_images.py for podman/buildah (CONTAINERS_CONF).
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""


@dataclasses.dataclass(frozen=True)
class ImageSpec:
    """One image `make images` builds: its Dockerfile, base package list and venv extras."""

    kind: str  # service | worker | worker-gpu | redis
    dockerfile: str | None  # under sandbox/; None: the base itself is the image (redis)
    packages: str  # sandbox/packages/<packages>.txt on top of base.txt
    extras: tuple[str, ...] = ()  # more requirements in the venv (e.g. pytest for workers)
    parent: str | None = None  # kind this image is built FROM (kernel images); None: from the base
    locks: tuple[str, ...] = ()  # sandbox/kernels/<lock>.txt wheel sets installed on the parent


SPECS: dict[str, ImageSpec] = {
    "service": ImageSpec("service", "Dockerfile.service", "service"),
    "worker": ImageSpec("worker", "Dockerfile.compile", "worker", ("pytest>=8.2",)),
    "worker-gpu": ImageSpec("worker-gpu", "Dockerfile.execute", "gpu", ("pytest>=8.2",)),
    "redis": ImageSpec("redis", None, "redis"),
    # The kernelbench stages: about 6 GB more each, so built only when asked for.
    "worker-kernels": ImageSpec(
        "worker-kernels", "Dockerfile.compile-kernels", "worker", parent="worker", locks=("torch", "nvcc")
    ),
    "worker-gpu-kernels": ImageSpec(
        "worker-gpu-kernels", "Dockerfile.execute-kernels", "gpu", parent="worker-gpu", locks=("torch",)
    ),
}
DEFAULT_KINDS = ("service", "worker", "worker-gpu")
KERNELS = REPO / "sandbox" / "kernels"


def app_version() -> str:
    """The chart's appVersion: every image is tagged with it."""
    text = (REPO / "deploy/helm/distrs/Chart.yaml").read_text()
    m = re.search(r'^appVersion:\s*"?([^"\s]+)"?', text, re.M)
    if not m:
        raise SystemExit("deploy/helm/distrs/Chart.yaml has no appVersion")
    return m.group(1)


def image_name(kind: str, registry: str = REGISTRY, tag: str | None = None) -> str:
    """Name the chart uses by default: <registry>/distrs-<kind>:<appVersion>.

    The Redis image exists for the pod-runtime tests only and stays local.
    """
    if kind == "redis":
        registry = "localhost"
    return f"{registry}/distrs-{kind}:{tag or app_version()}"


def _sha(parts: Iterable[bytes | str]) -> str:
    h = hashlib.sha256()
    for p in parts:
        b = p.encode() if isinstance(p, str) else p
        h.update(len(b).to_bytes(8, "big"))
        h.update(b)
    return h.hexdigest()


def source_hash() -> str:
    """Hash of what goes into the project's wheel: the package tree, its metadata and setup.py
    (the C extension); not what a local build left in the tree (the in-place extension)."""
    files = [REPO / "pyproject.toml", REPO / "README.md", REPO / "setup.py"]
    files += sorted(
        p
        for p in (REPO / "distrs").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".so", ".pyd")
    )
    return _sha(x for p in files for x in (str(p.relative_to(REPO)), p.read_bytes()))


class Tool:
    """The container tool: docker, podman or buildah, with the few verbs the build needs."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.env = dict(os.environ)
        if name in ("podman", "buildah") and "CONTAINERS_CONF" not in self.env:
            CACHE.mkdir(parents=True, exist_ok=True)
            conf = CACHE / "containers.conf"
            if not conf.exists() or conf.read_text() != CONTAINERS_CONF:
                conf.write_text(CONTAINERS_CONF)
            self.env["CONTAINERS_CONF"] = str(conf)

    def run(self, *args: str, check: bool = True, capture: bool = False) -> subprocess.CompletedProcess[str]:
        r = subprocess.run(
            [self.name, *args],
            env=self.env,
            text=True,
            stdout=subprocess.PIPE if capture else None,
            stderr=subprocess.PIPE if capture else None,
        )
        if check and r.returncode != 0:
            detail = f": {r.stderr.strip()[-2000:]}" if capture and r.stderr else ""
            raise SystemExit(f"{self.name} {' '.join(args[:2])} ... failed ({r.returncode}){detail}")
        return r

    def label(self, image: str, key: str) -> str | None:
        """Value of label `key` on a local image; None when the image is absent."""
        if self.name == "buildah":
            fmt = '{{index .Docker.Config.Labels "' + key + '"}}'
            r = self.run("inspect", "--type", "image", "--format", fmt, image, check=False, capture=True)
        else:
            fmt = '{{index .Config.Labels "' + key + '"}}'
            r = self.run("image", "inspect", "--format", fmt, image, check=False, capture=True)
        if r.returncode != 0:
            return None
        return r.stdout.strip().replace("<no value>", "")

    def image_id(self, image: str) -> str | None:
        if self.name == "buildah":
            r = self.run(
                "inspect", "--type", "image", "--format", "{{.FromImageID}}", image, check=False, capture=True
            )
        else:
            r = self.run("image", "inspect", "--format", "{{.Id}}", image, check=False, capture=True)
        return r.stdout.strip() if r.returncode == 0 else None

    def import_tar(self, tar: Path, image: str, labels: dict[str, str]) -> None:
        if self.name == "buildah":
            ctr = self.run("from", "scratch", capture=True).stdout.strip()
            try:
                self.run("add", ctr, str(tar), "/")
                for k, v in labels.items():
                    self.run("config", "--label", f"{k}={v}", ctr)
                self.run("commit", "--quiet", ctr, image)
            finally:
                self.run("rm", ctr, check=False, capture=True)
            return
        changes = [f"LABEL {k}={v}" for k, v in labels.items()] + ['CMD ["/bin/bash"]']
        args = [x for c in changes for x in ("--change", c)]
        self.run("import", *args, str(tar), image, capture=True)

    def build(
        self,
        dockerfile: Path,
        image: str,
        build_args: dict[str, str],
        labels: dict[str, str],
        offline: bool = True,
    ) -> None:
        args = ["bud"] if self.name == "buildah" else ["build"]
        args += ["-f", str(dockerfile), "-t", image]
        if offline:
            args += ["--network", "none"]
        if offline and self.name != "docker":
            args += ["--layers", "--pull=never"] if self.name == "podman" else ["--pull-never"]
        for k, v in build_args.items():
            args += ["--build-arg", f"{k}={v}"]
        for k, v in labels.items():
            args += ["--label", f"{k}={v}"]
        self.run(*args, str(REPO))

    def remove_other_tags(self, image: str) -> None:
        """Untag superseded versions of `image` (best effort: kept while an image uses them)."""
        if self.name == "buildah":
            return
        repo = image.rsplit(":", 1)[0]
        r = self.run("images", "--format", "{{.Repository}}:{{.Tag}}", repo, check=False, capture=True)
        for old in r.stdout.split():
            if old != image and old.rsplit(":", 1)[0] == repo:
                self.run("rmi", old, check=False, capture=True)

    def prune_superseded(self) -> None:
        """Remove this tool's untagged images that carry KEY_LABEL: those a rebuild superseded.

        A rebuild moves the tag to the new image and leaves the old one (and, with `--layers`,
        its intermediate images) untagged; each rebuild after a source change would keep about
        2-6 GB more. The label filter keeps this to images this script built (and intermediates
        of images built on its bases); the layer cache of the current images has children and
        is kept, so the next rebuild stays as fast.
        """
        if self.name == "buildah":
            return
        self.run("image", "prune", "--force", "--filter", f"label={KEY_LABEL}", check=False, capture=True)

    def tag(self, src: str, dst: str) -> None:
        self.run("tag", src, dst, capture=True)

    def run_in(self, image: str, *cmd: str) -> str:
        """stdout of a command in a throw-away container (python version probe)."""
        if self.name == "buildah":
            ctr = self.run("from", "--pull-never", image, capture=True).stdout.strip()
            try:
                return self.run("run", ctr, "--", *cmd, capture=True).stdout
            finally:
                self.run("rm", ctr, check=False, capture=True)
        return self.run("run", "--rm", "--network", "none", image, *cmd, capture=True).stdout


def pick_tool(override: str | None = None) -> Tool:
    """IMAGE_TOOL if given, else docker when its daemon answers, else podman, else buildah."""
    name = override or os.environ.get("IMAGE_TOOL") or ""
    if name:
        if not shutil.which(name):
            raise SystemExit(f"IMAGE_TOOL={name}: not found on PATH")
        return Tool(name)
    if shutil.which("docker"):
        ok = subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0
        if ok:
            return Tool("docker")
    for n in ("podman", "buildah"):
        if shutil.which(n):
            return Tool(n)
    raise SystemExit("no container tool: install podman (scripts/system-deps.sh) or set IMAGE_TOOL")


def _log(msg: str) -> None:
    print(f"[images] {msg}", file=sys.stderr, flush=True)


def ensure_cuda_base(tool: Tool, cuda_image: str) -> str:
    """GPU base from an NVIDIA CUDA runtime image: sandbox/Dockerfile.base (apt; needs registries)."""
    dockerfile = REPO / "sandbox/Dockerfile.base"
    lists = [REPO / "sandbox/packages/base.txt", REPO / "sandbox/packages/gpu.txt"]
    key = _sha([cuda_image, dockerfile.read_bytes(), *(p.read_bytes() for p in lists)])[:16]
    image = f"localhost/distrs-base-gpu-cuda:{key}"
    if tool.label(image, KEY_LABEL) != key:
        _log(f"base gpu: {cuda_image} + sandbox/packages/gpu.txt (apt, online)")
        tool.build(
            dockerfile, image, {"FROM_IMAGE": cuda_image, "PACKAGES": "gpu"}, {KEY_LABEL: key}, offline=False
        )
    return image


def ensure_base(tool: Tool, packages: str) -> str:
    """Local base image for one package list; made with mmdebstrap and imported when missing.

    CUDA_IMAGE (e.g. nvidia/cuda:12.6.3-runtime-ubuntu24.04) makes the GPU worker's base from
    that image instead, for real GPU nodes.
    """
    if packages == "gpu" and os.environ.get("CUDA_IMAGE"):
        return ensure_cuda_base(tool, os.environ["CUDA_IMAGE"])
    lists = [REPO / "sandbox/packages/base.txt", REPO / f"sandbox/packages/{packages}.txt"]
    mkbase = REPO / "scripts/mkbase.sh"
    key = _sha(
        [
            *(p.read_bytes() for p in lists),
            mkbase.read_bytes(),
            os.environ.get("DEBIAN_SUITE", "bookworm"),
            os.environ.get("DEBIAN_MIRROR", ""),
        ]
    )[:16]
    image = f"localhost/distrs-base-{packages}:{key}"
    if tool.label(image, KEY_LABEL) == key:
        return image
    tar = CACHE / "bases" / f"{packages}-{key}.tar"
    if not tar.exists():
        if not shutil.which("mmdebstrap"):
            raise SystemExit("mmdebstrap is missing: run scripts/system-deps.sh")
        tar.parent.mkdir(parents=True, exist_ok=True)
        _log(f"base {packages}: mmdebstrap (minutes; cached afterwards in {tar})")
        t0 = time.monotonic()
        subprocess.run([str(mkbase), str(tar), *map(str, lists)], check=True)
        _log(f"base {packages}: rootfs in {time.monotonic() - t0:.0f} s")
    _log(f"base {packages}: importing {tar.name} as {image}")
    tool.import_tar(tar, image, {KEY_LABEL: key})
    for old in tar.parent.glob(f"{packages}-*.tar"):  # superseded rootfs tarballs
        if old != tar:
            old.unlink()
    tool.remove_other_tags(image)
    return image


def base_python(tool: Tool, base: str) -> str:
    """`X.Y.Z` of the base's python3, cached per base image id."""
    bid = tool.image_id(base) or base
    f = CACHE / "python" / _sha([bid])[:16]
    if f.exists():
        return f.read_text().strip()
    out = tool.run_in(base, "python3", "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])").strip()
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(out)
    return out


def _requirements(extras: Iterable[str]) -> list[str]:
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    return [*meta["project"]["dependencies"], *extras]


def _manylinux_platforms() -> list[str]:
    """Binary wheel platforms a Debian/Ubuntu glibc (>= 2.35) x86_64 base can load."""
    plats = [f"manylinux_2_{m}_x86_64" for m in range(35, 4, -1)]
    return [*plats, "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64"]


def _platform_args(pyver: str) -> list[str]:
    """pip's target-interpreter flags for binary wheels of CPython `pyver` on a glibc x86_64 base."""
    plats = [x for p in _manylinux_platforms() for x in ("--platform", p)]
    nodot = "".join(pyver.split(".")[:2])
    return [
        "--only-binary=:all:", "--implementation", "cp", "--python-version", pyver,
        "--abi", f"cp{nodot}", "--abi", "abi3", "--abi", "none", *plats,
    ]  # fmt: skip


def _marker_gaps(wheel_dir: Path, pyver: str) -> list[str]:
    """Requirements of the wheels in `wheel_dir` that apply on CPython `pyver` but not on the host.

    `pip wheel` evaluates environment markers for the host interpreter; a base with another patch
    release (e.g. redis needs async-timeout on Python < 3.11.3) would miss those. Extras are not
    followed: the markers that differ between two patch releases are version markers.
    """
    import email.parser
    import zipfile

    from packaging.markers import default_environment
    from packaging.requirements import Requirement

    host: dict[str, Any] = dict(default_environment())
    target: dict[str, Any] = dict(
        host, python_full_version=pyver, python_version=".".join(pyver.split(".")[:2])
    )
    target["implementation_version"] = pyver
    out = []
    for whl in sorted(wheel_dir.glob("*.whl")):
        with zipfile.ZipFile(whl) as z:
            meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
            msg = email.parser.Parser().parsestr(z.read(meta).decode())
        for line in msg.get_all("Requires-Dist") or []:
            req = Requirement(line)
            if req.marker is None or "extra" in str(req.marker):
                continue
            if req.marker.evaluate({**target, "extra": ""}) and not req.marker.evaluate(
                {**host, "extra": ""}
            ):
                req.marker = None
                out.append(str(req))
    return sorted(set(out))


def ensure_wheels(pyver: str) -> tuple[Path, Path]:
    """(dependency wheelhouse, project wheel dir) for CPython `pyver` (X.Y.Z); built when missing.

    One wheelhouse for every image (the union of their extras): each image installs only what
    it names, so the service gets no pytest.
    """
    reqs = _requirements(sorted({x for s in SPECS.values() for x in s.extras}))
    dep_dir = CACHE / "wheels" / f"deps-py{pyver}-{_sha(reqs)[:16]}"
    if not (dep_dir / ".complete").exists():
        shutil.rmtree(dep_dir, ignore_errors=True)
        dep_dir.mkdir(parents=True)
        _log(f"wheelhouse for CPython {pyver}: {len(reqs)} requirements")
        host = f"{sys.version_info[0]}.{sys.version_info[1]}"
        pip = [sys.executable, "-m", "pip", "-q"]
        if pyver.startswith(host + "."):
            subprocess.run([*pip, "wheel", "--wheel-dir", str(dep_dir), *reqs], check=True)
            gaps = _marker_gaps(dep_dir, pyver)
            if gaps:
                subprocess.run([*pip, "wheel", "--wheel-dir", str(dep_dir), *gaps], check=True)
        else:
            subprocess.run(
                [*pip, "download", "--dest", str(dep_dir), *_platform_args(pyver), *reqs], check=True
            )
        (dep_dir / ".complete").write_text("\n".join(reqs))
    src_dir = CACHE / "wheels" / f"distrs-{source_hash()[:16]}"
    if not (src_dir / ".complete").exists():
        shutil.rmtree(src_dir, ignore_errors=True)
        src_dir.mkdir(parents=True)
        _log("project wheel")
        subprocess.run(
            [sys.executable, "-m", "pip", "-q", "wheel", "--no-deps", "--wheel-dir", str(src_dir), str(REPO)],
            check=True,
        )
        _check_project_wheel(src_dir, pyver)
        (src_dir / ".complete").write_text("")
    return dep_dir, src_dir


def _check_project_wheel(src_dir: Path, pyver: str) -> None:
    """The project's wheel is a platform wheel (``distrs-V-cp311-abi3-linux_<arch>.whl``: the C
    serve loops, ``distrs/scaling/_serve.c``, built for CPython's stable ABI) or, built where
    no C compiler is, one without the extension (the planner then runs the Python loops). Either
    installs on the image's CPython 3.11+; say which it is, and stop on one that cannot."""
    import zipfile

    wheels = sorted(src_dir.glob("distrs-*.whl"))
    if len(wheels) != 1:
        raise SystemExit(f"expected one project wheel in {src_dir}, found {[w.name for w in wheels]}")
    tag = wheels[0].name.removesuffix(".whl").split("-", 2)[2]
    py, abi, _plat = tag.split("-")
    minor = int(pyver.split(".")[1])
    if abi == "abi3":  # cp3X-abi3: CPython 3.X and later
        fits = py.startswith("cp3") and int(py.removeprefix("cp3")) <= minor
    else:
        fits = abi == "none" or abi == f"cp3{minor}"
    if not fits:
        raise SystemExit(f"project wheel {wheels[0].name} does not install on CPython {pyver}")
    with zipfile.ZipFile(wheels[0]) as z:
        names = z.namelist()
    native = any(n.startswith("distrs/scaling/_serve.") and n.endswith((".so", ".pyd")) for n in names)
    loops = "the C serve loops" if native else "no C compiler here: the Python serve loops"
    _log(f"project wheel {wheels[0].name}: {loops}")


def _link_all(paths: Sequence[Path], dest: Path) -> None:
    dest.mkdir(parents=True)
    for p in paths:
        try:
            os.link(p, dest / p.name)
        except OSError:
            shutil.copy2(p, dest / p.name)


def _stage_wheels(dep_dir: Path, src_dir: Path) -> None:
    """Hard-link the wheel set into build/wheels/{deps,project}, the Dockerfiles' build inputs.

    deps/requirements.txt names the project's dependencies (the Dockerfiles install those first,
    then the project's wheel without dependencies).
    """
    stage = REPO / "build" / "wheels"
    shutil.rmtree(stage, ignore_errors=True)
    _link_all(sorted(dep_dir.glob("*.whl")), stage / "deps")
    (stage / "deps" / "requirements.txt").write_text("\n".join(_requirements(())) + "\n")
    _link_all(sorted(src_dir.glob("*.whl")), stage / "project")


# ---- kernel images: pinned torch / CUDA wheels -------------------------------------------------


def _resolve(requirements: Sequence[str], pyver: str) -> dict[str, tuple[str, str, str]]:
    """name -> (version, file name, sha256) of the wheels pip picks for `requirements` on `pyver`.

    pip's own resolver (`install --dry-run --report`) for the target interpreter and platform;
    nothing is installed.
    """
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        subprocess.run(
            [sys.executable, "-m", "pip", "-q", "install", "--dry-run", "--ignore-installed",
             "--report", str(report), "--target", str(Path(tmp) / "t"), *_platform_args(pyver),
             *requirements],
            check=True,
        )  # fmt: skip
        items = json.loads(report.read_text())["install"]
    out = {}
    for item in items:
        info = item["download_info"]
        digest = (info.get("archive_info") or {}).get("hashes", {}).get("sha256")
        if not digest:
            raise SystemExit(f"{info['url']}: the index gave no sha256")
        name = item["metadata"]["name"].lower().replace("_", "-")
        out[name] = (item["metadata"]["version"], info["url"].rsplit("/", 1)[-1], digest)
    return out


def _lock_text(title: str, pyver: str, pins: dict[str, tuple[str, str, str]]) -> str:
    lines = [
        f"# {title}",
        f"# CPython {pyver}, manylinux x86_64. Written by `scripts/build_images.py --lock-kernels`.",
    ]
    for name in sorted(pins):
        version, _, digest = pins[name]
        lines.append(f"{name}=={version} --hash=sha256:{digest}")
    return "\n".join(lines) + "\n"


def lock_kernels(pyver: str = "3.11") -> None:
    """Re-resolve sandbox/kernels/{torch,nvcc}.txt from their .in files, with sha256 hashes.

    torch.txt: the `kernels` extra (torch, ninja and everything they need), installed in both
    kernel images. nvcc.txt: what the compile image adds for building (nvcc, its front end, the
    CUDA and CCCL headers), resolved together with torch so its versions are the CUDA toolkit
    release torch was built against, and holding only what torch.txt lacks.
    """
    torch_in = _requirement_lines(KERNELS / "torch.in")
    nvcc_in = _requirement_lines(KERNELS / "nvcc.in")
    torch = _resolve(torch_in, pyver)
    both = _resolve([*torch_in, *nvcc_in], pyver)
    for name, pin in torch.items():
        if both.get(name) != pin:
            raise SystemExit(f"{name}: torch alone resolves to {pin[0]}, with nvcc to {both.get(name)}")
    nvcc = {k: v for k, v in both.items() if k not in torch}
    (KERNELS / "torch.txt").write_text(_lock_text("The `kernels` extra: both kernel images.", pyver, torch))
    (KERNELS / "nvcc.txt").write_text(
        _lock_text("nvcc and the CUDA headers: the compile image only.", pyver, nvcc)
    )
    for f in ("torch.txt", "nvcc.txt"):
        _log(f"wrote sandbox/kernels/{f}")


def _requirement_lines(path: Path) -> list[str]:
    """The requirements of a pip requirements file, comments and blank lines dropped."""
    lines = (ln.split("#", 1)[0].strip() for ln in path.read_text().splitlines())
    return [ln for ln in lines if ln]


def _lock_python(lock: Path) -> str:
    m = re.search(r"^# CPython (\d+\.\d+),", lock.read_text(), re.M)
    if not m:
        raise SystemExit(f"{lock}: no '# CPython X.Y' line; regenerate with --lock-kernels")
    return m.group(1)


def kernel_locks_key() -> str:
    """The hash of every kernel lock file: what the kernel wheel set is, named by content."""
    files = sorted(KERNELS.glob("*.txt"))
    return _sha(x for f in files for x in (f.name, f.read_bytes()))[:16]


def ensure_kernel_wheels(locks: Sequence[str], pyver: str) -> Path:
    """The wheelhouse of the given lock files (all of them: one set per machine), downloaded once.

    Named by the hash of every lock file, whose lines carry each wheel's sha256: the directory is
    content-addressed, and pip checks every file against its hash (`--require-hashes`). pip's
    HTTP cache is used as usual, so a machine that installed the extra fetches nothing again.
    """
    files = sorted(KERNELS.glob("*.txt"))
    for name in locks:
        want = _lock_python(KERNELS / f"{name}.txt")
        if not pyver.startswith(want + "."):
            raise SystemExit(
                f"sandbox/kernels/{name}.txt is for CPython {want}, the base has {pyver}: "
                "run scripts/build_images.py --lock-kernels"
            )
    out = CACHE / "wheels" / f"kernels-{kernel_locks_key()}"
    if (out / ".complete").exists():
        return out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    _log(f"kernel wheelhouse {out.name}: downloading the pinned torch and CUDA wheels (~3 GB, once)")
    t0 = time.monotonic()
    reqs = [x for f in files for x in ("-r", str(f))]
    subprocess.run(
        [sys.executable, "-m", "pip", "-q", "download", "--no-deps", "--require-hashes", "--dest", str(out),
         *_platform_args(pyver), *reqs],
        check=True,
    )  # fmt: skip
    for old in out.parent.glob("kernels-*"):  # superseded wheel sets
        if old != out:
            shutil.rmtree(old, ignore_errors=True)
    (out / ".complete").write_text("")
    _log(f"kernel wheelhouse: {sum(p.stat().st_size for p in out.glob('*.whl')) >> 20} MiB "
         f"in {time.monotonic() - t0:.0f} s")  # fmt: skip
    return out


def _stage_kernel_wheels(wheels: Path) -> None:
    """build/wheels/kernels: the wheelhouse and the lock files, bound into the build (RUN --mount)."""
    stage = REPO / "build" / "wheels"
    shutil.rmtree(stage, ignore_errors=True)
    _link_all(sorted(wheels.glob("*.whl")), stage / "kernels")
    for f in KERNELS.glob("*.txt"):
        shutil.copyfile(f, stage / "kernels" / f.name)


def build_kernels(tool: Tool, spec: ImageSpec, registry: str, tag: str, force: bool = False) -> str:
    """A kernel image: its parent (the stage's worker image) plus the locked wheel sets."""
    assert spec.parent is not None and spec.dockerfile is not None
    parent = build_one(tool, SPECS[spec.parent], registry, tag, force=False)
    image = image_name(spec.kind, registry, tag)
    pyver = base_python(tool, ensure_base(tool, spec.packages))
    dockerfile = REPO / "sandbox" / spec.dockerfile
    key = _sha(
        [
            tool.image_id(parent) or parent,
            dockerfile.read_bytes(),
            *(x for n in spec.locks for x in (n, (KERNELS / f"{n}.txt").read_bytes())),
        ]
    )[:32]
    if not force and tool.label(image, KEY_LABEL) == key:
        _log(f"{image}: up to date")
        return image
    wheels = ensure_kernel_wheels(spec.locks, pyver)
    _stage_kernel_wheels(wheels)
    _log(f"{image}: building from {parent}")
    t0 = time.monotonic()
    tool.build(
        dockerfile,
        image,
        {"BASE_IMAGE": parent, "LOCKS": " ".join(f"{n}.txt" for n in spec.locks), "WHEELS": wheels.name},
        {KEY_LABEL: key, "org.opencontainers.image.version": tag},
    )
    _log(f"{image}: built in {time.monotonic() - t0:.0f} s")
    tool.prune_superseded()
    return image


def build_one(tool: Tool, spec: ImageSpec, registry: str, tag: str, force: bool = False) -> str:
    """Build (or find up to date) one image; returns its name."""
    if spec.parent is not None:
        return build_kernels(tool, spec, registry, tag, force)
    image = image_name(spec.kind, registry, tag)
    base = ensure_base(tool, spec.packages)
    if spec.dockerfile is None:  # the base as it is, under the image's name
        if force or tool.image_id(image) != tool.image_id(base):
            tool.tag(base, image)
            tool.prune_superseded()
        return image
    pyver = base_python(tool, base)
    dep_dir, src_dir = ensure_wheels(pyver)
    dockerfile = REPO / "sandbox" / spec.dockerfile
    wheel_key = _sha(
        [str(sorted(p.name for p in dep_dir.glob("*.whl"))), (dep_dir / ".complete").read_text()]
    )
    key = _sha(
        [
            tool.image_id(base) or base,
            dockerfile.read_bytes(),
            wheel_key,
            source_hash(),
            " ".join(spec.extras),
        ]
    )[:32]
    if not force and tool.label(image, KEY_LABEL) == key:
        _log(f"{image}: up to date")
        return image
    _stage_wheels(dep_dir, src_dir)
    _log(f"{image}: building from {base}")
    t0 = time.monotonic()
    tool.build(
        dockerfile,
        image,
        {"BASE_IMAGE": base, "EXTRAS": " ".join(spec.extras)},
        {KEY_LABEL: key, "org.opencontainers.image.version": tag},
    )
    _log(f"{image}: built in {time.monotonic() - t0:.0f} s")
    tool.prune_superseded()
    return image


@contextlib.contextmanager
def build_lock() -> Iterator[None]:
    """One build at a time per host: the cache, the bases and the image names are shared, and a
    prune must not take an image another build has just superseded but still inspects."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def build(
    kinds: Sequence[str] = DEFAULT_KINDS,
    *,
    tool: Tool | None = None,
    registry: str = REGISTRY,
    tag: str | None = None,
    force: bool = False,
) -> dict[str, str]:
    """Build the given image kinds; returns kind -> image name. What `make images` runs."""
    tool = tool or pick_tool()
    tag = tag or app_version()
    out = {}
    with build_lock():
        for kind in kinds:
            if kind not in SPECS:
                raise SystemExit(f"unknown image {kind!r}; known: {', '.join(SPECS)}")
            out[kind] = build_one(tool, SPECS[kind], registry, tag, force)
        # A superseded base could not be untagged while images built on it were kept; those
        # are gone now, so untag it and let the prune take it.
        for packages in {SPECS[kind].packages for kind in kinds}:
            tool.remove_other_tags(ensure_base(tool, packages))
        tool.prune_superseded()
    return out


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kinds", nargs="*", default=list(DEFAULT_KINDS), help=f"images: {', '.join(SPECS)}")
    ap.add_argument("--registry", default=REGISTRY, help="name prefix (default %(default)s)")
    ap.add_argument("--tag", default=None, help="tag (default: the chart's appVersion)")
    ap.add_argument("--force", action="store_true", help="rebuild images even when up to date")
    ap.add_argument(
        "--lock-kernels", action="store_true", help="re-resolve sandbox/kernels/*.txt from *.in and exit"
    )
    a = ap.parse_args(argv)
    if a.lock_kernels:
        lock_kernels()
        return
    t0 = time.monotonic()
    tool = pick_tool()
    built = build(a.kinds, tool=tool, registry=a.registry, tag=a.tag, force=a.force)
    for kind, image in built.items():
        print(f"{kind:11s} {image}")
    _log(f"done with {tool.name} in {time.monotonic() - t0:.1f} s")


if __name__ == "__main__":
    main()
