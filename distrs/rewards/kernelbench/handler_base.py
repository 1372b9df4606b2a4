"""What the ``kernelbench`` compile and execute handlers share: settings, sandbox, toolchain,
readiness."""

from __future__ import annotations

from distrs import sandbox as sandboxes
from distrs.rewards.kernelbench.settings import KernelSettings
from distrs.rewards.kernelbench.toolchain import Toolchain
from distrs.sandbox import Sandbox


class KernelHandler:
    def __init__(self, sandbox: Sandbox | None = None, settings: KernelSettings | None = None) -> None:
        self._sandbox = sandbox
        self._settings = settings or KernelSettings()
        self.toolchain = Toolchain(self._settings)

    @property
    def settings(self) -> KernelSettings:
        return self._settings

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox given at construction, else the worker's shared one."""
        return self._sandbox or sandboxes.shared()

    def toolchain_ready(self, *, nvcc: bool = False) -> tuple[bool, str]:
        """torch and ninja import in the configured interpreter (the ``kernels`` extra); with
        ``nvcc`` (the compile stage of a GPU pool) the CUDA compiler is found too."""
        return self.toolchain.readiness(nvcc=nvcc)

    def sandbox_ready(self) -> tuple[bool, str]:
        return (True, "") if self._sandbox is not None else sandboxes.readiness()
