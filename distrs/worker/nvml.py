"""What the worker reads from NVML about the GPU it owns, behind a small Protocol.

The execute worker needs a handful of facts about its GPU: who else uses its memory, whether it
has uncorrected ECC errors or pending page retirements / row remaps, which critical Xid events it
raised, and the gauges an operator graphs (utilisation, memory, temperature, clocks, power).
``Nvml.read`` returns them as one plain ``GpuState``; every value NVML does not give on this GPU
(a MIG slice has no utilisation counter, a consumer card no ECC) is ``None`` rather than an
error, so health rules and metrics decide what a missing value means.

``PyNvml`` is the real reader over ``nvidia-ml-py`` (``import pynvml``, the library NVIDIA ships).
Tests inject a fake ``Nvml`` (or a fake ``pynvml`` module into ``PyNvml``): no test needs a GPU.

Which GPU: ``select_gpu`` picks it from ``CUDA_VISIBLE_DEVICES`` / ``NVIDIA_VISIBLE_DEVICES``
(a ``GPU-…`` or ``MIG-…`` UUID, or an index), else the only GPU NVML sees (in a pod the device
plugin exposes just the allocated one).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class NvmlError(Exception):
    """NVML could not be used or the GPU could not be read (driver missing, GPU lost, ...)."""


@dataclass(frozen=True)
class GpuState:
    """One reading of one GPU (or MIG slice). ``None``: NVML does not give it here."""

    uuid: str
    name: str
    index: int = 0
    mig: bool = False
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    utilization: float | None = None  # 0..1
    memory_utilization: float | None = None  # 0..1
    temperature_c: float | None = None
    sm_clock_hz: float | None = None
    memory_clock_hz: float | None = None
    power_w: float | None = None
    processes: tuple[tuple[int, int], ...] | None = None  # (pid, bytes) of compute processes
    ecc_uncorrected: int | None = None  # volatile count since the last driver load
    retirement_pending: bool | None = None  # page retirement or row remap waiting for a reset
    remap_failed: bool | None = None  # a row remap failed: the GPU needs servicing
    xids: tuple[int, ...] = field(default_factory=tuple)  # critical Xids since the last consuming read
    xids_readable: bool = False


class Nvml(Protocol):
    """Reads the state of the GPU named by ``selector`` (see ``select_gpu``). The Xid events
    raised since the last read with ``consume_xids`` come with each reading; only the health
    check consumes them (a metrics scrape must not make it miss one)."""

    def read(self, selector: str | None, consume_xids: bool = True) -> GpuState: ...

    def driver_version(self) -> str | None: ...


def select_gpu(env: Mapping[str, str] | None = None) -> str | None:
    """The GPU this worker owns as NVML should look it up: a UUID, an index, or None (the only
    one visible). A list (``0,1``) is returned whole: ``read`` then refuses it."""
    env = os.environ if env is None else env
    for var in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"):
        v = (env.get(var) or "").strip()
        if v and v not in ("all", "void", "none"):
            return v
    return None


def _mhz(v: float | None) -> float | None:
    return None if v is None else float(v) * 1e6


class PyNvml:
    """``Nvml`` over ``nvidia-ml-py``. ``lib`` is the ``pynvml`` module (injectable for tests).

    NVML is initialised on first use (a failure is an ``NvmlError`` naming the cause); the
    handle and the Xid event set of each selector are kept; each ``read`` drains the events NVML
    queued into a pending list, which a consuming read returns and empties."""

    def __init__(self, lib: ModuleType | Any | None = None) -> None:
        self._lib = lib
        self._lock = threading.Lock()
        self._started = False
        self._handles: dict[str | None, Any] = {}
        self._events: dict[str | None, Any] = {}
        self._xids: dict[str | None, list[int]] = {}

    def _nvml(self) -> Any:
        if self._lib is None:
            try:
                import pynvml
            except ImportError as exc:  # pragma: no cover - the dependency is declared
                raise NvmlError(f"nvidia-ml-py is not installed: {exc}") from exc
            self._lib = pynvml
        lib = self._lib
        if not self._started:
            try:
                lib.nvmlInit()
            except lib.NVMLError as exc:
                raise NvmlError(f"NVML unavailable: {exc}") from exc
            self._started = True
        return lib

    def driver_version(self) -> str | None:
        with self._lock:
            lib = self._nvml()
            try:
                return str(lib.nvmlSystemGetDriverVersion())
            except lib.NVMLError:
                return None

    def _handle(self, lib: Any, selector: str | None) -> tuple[Any, int]:
        if selector is not None and "," in selector:
            raise NvmlError(f"worker sees several GPUs ({selector}); an execute worker owns one")
        if selector is None:
            n = lib.nvmlDeviceGetCount()
            if n != 1:
                raise NvmlError(f"NVML sees {n} GPUs and none is named; set CUDA_VISIBLE_DEVICES")
            return lib.nvmlDeviceGetHandleByIndex(0), 0
        if selector.isdigit():
            return lib.nvmlDeviceGetHandleByIndex(int(selector)), int(selector)
        return lib.nvmlDeviceGetHandleByUUID(selector.encode()), 0

    def read(self, selector: str | None, consume_xids: bool = True) -> GpuState:
        with self._lock:
            lib = self._nvml()
            try:
                if selector not in self._handles:
                    self._handles[selector] = self._handle(lib, selector)
                    self._events[selector] = self._register_xids(lib, self._handles[selector][0])
                handle, index = self._handles[selector]
                pending = self._xids.setdefault(selector, [])
                state = self._read(lib, handle, index, self._events[selector], pending)
                if consume_xids:
                    pending.clear()
                return state
            except lib.NVMLError as exc:
                self._handles.pop(selector, None)  # e.g. GPU lost: look it up afresh next time
                raise NvmlError(f"cannot read GPU {selector or 0}: {exc}") from exc

    @staticmethod
    def _register_xids(lib: Any, handle: Any) -> Any:
        try:
            es = lib.nvmlEventSetCreate()
            lib.nvmlDeviceRegisterEvents(handle, lib.nvmlEventTypeXidCriticalError, es)
            return es
        except lib.NVMLError:  # not supported (MIG slices, some containers): Xids unreadable
            return None

    def _read(self, lib: Any, h: Any, index: int, events: Any, xids: list[int]) -> GpuState:
        def opt(fn: Callable[[], T]) -> T | None:
            try:
                return fn()
            except lib.NVMLError as exc:
                if getattr(exc, "value", None) == lib.NVML_ERROR_GPU_IS_LOST:
                    raise
                return None

        mem = opt(lambda: lib.nvmlDeviceGetMemoryInfo(h))
        util = opt(lambda: lib.nvmlDeviceGetUtilizationRates(h))
        procs = opt(lambda: lib.nvmlDeviceGetComputeRunningProcesses(h))
        power = opt(lambda: lib.nvmlDeviceGetPowerUsage(h))
        temp = opt(lambda: lib.nvmlDeviceGetTemperature(h, lib.NVML_TEMPERATURE_GPU))
        rows = opt(lambda: lib.nvmlDeviceGetRemappedRows(h))
        pages = opt(lambda: lib.nvmlDeviceGetRetiredPagesPendingStatus(h))
        pending: bool | None = None
        if rows is not None or pages is not None:
            pending = bool(rows is not None and rows[2]) or (pages == lib.NVML_FEATURE_ENABLED)
        if events is not None:
            while True:
                try:
                    data = lib.nvmlEventSetWait_v2(events, 0)
                except lib.NVMLError:  # NVML_ERROR_TIMEOUT: no more events
                    break
                xids.append(int(data.eventData))
        name = lib.nvmlDeviceGetName(h)
        uuid = lib.nvmlDeviceGetUUID(h)
        return GpuState(
            uuid=uuid.decode() if isinstance(uuid, bytes) else str(uuid),
            name=name.decode() if isinstance(name, bytes) else str(name),
            index=index,
            mig=bool(opt(lambda: lib.nvmlDeviceIsMigDeviceHandle(h))),
            memory_used_bytes=None if mem is None else int(mem.used),
            memory_total_bytes=None if mem is None else int(mem.total),
            utilization=None if util is None else util.gpu / 100.0,
            memory_utilization=None if util is None else util.memory / 100.0,
            temperature_c=None if temp is None else float(temp),
            sm_clock_hz=_mhz(opt(lambda: lib.nvmlDeviceGetClockInfo(h, lib.NVML_CLOCK_SM))),
            memory_clock_hz=_mhz(opt(lambda: lib.nvmlDeviceGetClockInfo(h, lib.NVML_CLOCK_MEM))),
            power_w=None if power is None else power / 1000.0,
            processes=None
            if procs is None
            else tuple((int(p.pid), int(p.usedGpuMemory or 0)) for p in procs),
            ecc_uncorrected=opt(
                lambda: int(
                    lib.nvmlDeviceGetTotalEccErrors(
                        h, lib.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, lib.NVML_VOLATILE_ECC
                    )
                )
            ),
            retirement_pending=pending,
            remap_failed=None if rows is None else bool(rows[3]),
            xids=tuple(xids),
            xids_readable=events is not None,
        )
