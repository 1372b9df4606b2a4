"""The kernel toolchain a worker offers its jails: interpreter with torch, CUDA, compilers.

:class:`Toolchain` asks once and keeps the answers (each ``kernelbench`` handler holds one; the
worker's image does not change under it): whether torch and ninja import in the configured
interpreter (the ``kernels`` extra), their versions, where CUDA is, and the identity of the
compilers (real path, size, mtime), which every build-cache key includes, so an upgraded
toolchain never reuses an old build.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess

from distrs.rewards import cuda_toolkit
from distrs.rewards.compile_cache import tool_identity
from distrs.rewards.cuda_toolkit import Toolkit
from distrs.rewards.interpreter import Interpreter
from distrs.rewards.kernelbench.settings import KernelSettings
from distrs.sandbox import Mounts

EXTRA_HINT = "pip install 'distrs[kernels]' (torch and ninja) in the worker's interpreter"
_PROBE = (
    "import json, sys\n"
    "try:\n"
    "    import torch, ninja\n"
    "except Exception as e:\n"
    "    print(json.dumps({'ok': False, 'error': f'{type(e).__name__}: {e}'})); sys.exit(0)\n"
    "import os\n"
    "try:\n"
    "    import nvidia\n"
    "    inc = sorted(os.path.join(p, d, 'include') for p in nvidia.__path__ for d in os.listdir(p)\n"
    "                 if os.path.isdir(os.path.join(p, d, 'include')))\n"
    "except Exception:\n"
    "    inc = []\n"
    "print(json.dumps({'ok': True, 'torch': torch.__version__, 'cuda': torch.version.cuda,\n"
    "                  'cuda_includes': inc}))\n"
)


class Toolchain:
    """The toolchain of one handler's settings (see the module docstring)."""

    def __init__(self, settings: KernelSettings) -> None:
        self.settings = settings
        self.python = Interpreter(settings.python)
        self._probe: dict[str, object] | None = None
        self._toolkit: Toolkit | None = None
        self._toolkit_found = False
        self._key: str | None = None

    def probe(self) -> dict[str, object]:
        """``{"ok": True, "torch": ..., "cuda": ..., "cuda_includes": [...]}`` or ``{"ok": False,
        "error": ...}`` for the configured interpreter."""
        if self._probe is None:
            exe, _ = self.python.get()
            try:
                out = subprocess.run(
                    [exe, "-I", "-c", _PROBE], capture_output=True, text=True, timeout=120
                ).stdout
                self._probe = json.loads(out.strip().splitlines()[-1])
            except (OSError, subprocess.SubprocessError, ValueError, IndexError) as e:
                self._probe = {"ok": False, "error": f"cannot run {exe}: {e}"}
        assert self._probe is not None
        return self._probe

    def cuda_toolkit(self) -> Toolkit | None:
        """The CUDA toolkit builds use: ``nvcc`` under the configured home, ``$CUDA_HOME``,
        ``/usr/local/cuda`` or the worker's PATH (``distrs/rewards/cuda_toolkit.py``)."""
        if not self._toolkit_found:
            self._toolkit = cuda_toolkit.resolve("nvcc", self.settings.cuda_home)
            self._toolkit_found = True
        return self._toolkit

    def readiness(self, *, nvcc: bool = False) -> tuple[bool, str]:
        """torch and ninja in the interpreter; with ``nvcc`` (a compile worker of a GPU pool), the
        CUDA compiler too."""
        p = self.probe()
        if not p.get("ok"):
            return False, f"the kernelbench type needs torch and ninja ({p.get('error')}): {EXTRA_HINT}"
        if nvcc and self.settings.device == "cuda" and self.cuda_toolkit() is None:
            return False, "the kernelbench compile stage builds CUDA: " + cuda_toolkit.missing(
                "nvcc", self.settings.cuda_home
            ).replace("DISTRS_JUDGE_NVCC to its absolute path", "DISTRS_KERNELS_CUDA_HOME")
        return True, ""

    def jail_env(self, *, build: bool) -> dict[str, str]:
        """What a kernel jail sees: the interpreter's bin (ninja) and CUDA's on PATH, no secrets."""
        settings = self.settings
        exe, _ = self.python.get()
        tk = self.cuda_toolkit()
        home = os.path.dirname(os.path.dirname(tk.nvcc)) if tk is not None else cuda_toolkit.DEFAULT_HOME
        path = f"{os.path.dirname(exe)}:{home}/bin:/usr/local/bin:/usr/bin:/bin"
        env = {
            "PATH": path,
            "CUDA_HOME": home,
            "TORCH_CUDA_ARCH_LIST": settings.cuda_arch_list,
            "TORCH_EXTENSIONS_DIR": "/tmp/torch_extensions",
            "OMP_NUM_THREADS": str(settings.threads),
            "MKL_NUM_THREADS": str(settings.threads),
            "OPENBLAS_NUM_THREADS": str(settings.threads),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        if build:
            env["MAX_JOBS"] = str(settings.build_jobs)
            env["TMPDIR"] = "/jail/work"  # nvcc's intermediates on the session's disk, not /tmp
            includes = self.wheel_cuda_includes()
            if includes:  # searched after every -I: only what the toolkit lacks is taken from them
                env["CPATH"] = ":".join(includes)
        elif "CUDA_VISIBLE_DEVICES" in os.environ:
            env["CUDA_VISIBLE_DEVICES"] = os.environ["CUDA_VISIBLE_DEVICES"]
        return env

    def wheel_cuda_includes(self) -> list[str]:
        """The headers of the CUDA libraries torch's wheel brings (``nvidia/*/include``: cuSPARSE,
        cuBLAS, cuRAND ...). ``ATen/cuda/CUDAContext.h``, which many KernelBench candidates
        include, needs ``cusparse.h``, which a compiler-only toolkit (the compile image's) does not
        have: a candidate must not fail to compile for a header the service's toolchain lacks."""
        inc = self.probe().get("cuda_includes")
        return [str(p) for p in inc] if isinstance(inc, list) else []

    def jail_mounts(self, extra: Mounts | None = None) -> Mounts:
        _, mounts = self.python.get()
        tk = self.cuda_toolkit()
        ro = {*mounts.ro_paths, *(cuda_toolkit.jail_ro_paths(tk) if tk is not None else ())}
        ro = {p for p in ro if os.path.exists(p) and not p.startswith("/usr/")}
        if extra is None:
            return Mounts(ro_paths=tuple(sorted(ro)))
        return Mounts(
            ro_paths=tuple(sorted(ro | set(extra.ro_paths))), dev_paths=extra.dev_paths, sys=extra.sys
        )

    def key(self) -> str:
        """A hash of everything besides the call that decides what a build produces."""
        if self._key is None:
            p = self.probe()
            tk = self.cuda_toolkit()
            parts = [
                "kb-toolchain/1",
                str(p.get("torch")),
                str(p.get("cuda")),
                tool_identity(tk.nvcc) if tk is not None else "no-nvcc",
                tool_identity("c++"),
                tool_identity("g++"),
                self.settings.cuda_arch_list,
            ]
            self._key = hashlib.sha256(json.dumps(parts).encode()).hexdigest()
        return self._key
