"""Reward plugins: a user's scoring function run in a sandboxed child, one request at a time.

A plugin is ``function(payload) -> float | bool | dict`` (the dict: ``{"score": number,
"status"?: a result status, "detail"?: object}``), named ``module:function`` by an entry point of
group ``distrs.rewards`` or by ``plugin:`` in the pipelines YAML (``registry.py``). The worker
never imports it: each call starts ``plugin_child.py`` in the same jail the judged types use (no
network, read-only system, rlimits), with the stage's deadline, so whatever the plugin does with
an adversarial payload stays in that one request:

* it returns a valid value: ``ok`` (score > 0, or ``true``) / ``wrong_answer`` (score <= 0, or
  ``false``), or the status it gives;
* it raises, returns something else, crashes or exceeds its memory: ``internal_error`` with the
  error in ``detail.error`` (never the model's fault);
* it runs past the deadline: the jail is killed and the request ends ``timeout``.

The function's package must be importable by the worker's interpreter; when it lives outside the
interpreter's prefixes (a source checkout), its directory is bound read-only into the jail.

Where the sandbox keeps zygotes (``DISTRS_PLUGIN_ZYGOTE``, on; docs/sandbox.md "Python zygote"),
the child is not started but forked, in fresh namespaces with the same uid, limits and filter,
from a warm interpreter that has loaded ``plugin_child.py`` (never the plugin: the plugin is
imported in each call's own child, after its privileges are dropped), which saves the jail's and
the interpreter's start on every call (``distrs/sandbox/forked_run.py``).
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from distrs import sandbox as sandboxes
from distrs.core.model import Status
from distrs.rewards.base import MiB, StageInput, StageOutput, snippet, stage_budget
from distrs.rewards.interpreter import Interpreter
from distrs.sandbox import Limits, Mounts, Sandbox
from distrs.sandbox.forked_run import run_forked
from distrs.sandbox.local import LocalSandbox, LocalSession
from distrs.sandbox.zygote import Zygote

CHILD_SOURCE = Path(__file__).with_name("plugin_child.py")

_STATUSES = {s.value for s in Status}


class PluginSettings(BaseSettings):
    """Limits of reward plugin calls (``DISTRS_PLUGIN_*``)."""

    model_config = SettingsConfigDict(env_prefix="DISTRS_PLUGIN_", extra="ignore")

    timeout_s: float = Field(
        default=30.0, gt=0, description="Wall limit per plugin call (capped by the stage)."
    )
    memory_mb: int = Field(default=2048, gt=0, description="Address-space limit of the plugin child.")
    python: str = Field(default="", description="Interpreter the plugin runs with; empty = the worker's.")
    zygote: bool = Field(
        default=True,
        description="Fork each call's child from a warm zygote where the sandbox keeps one "
        "(docs/sandbox.md); false: a jail and an interpreter per call.",
    )


def plugin_root(entry: str) -> str | None:
    """The directory holding the plugin's top-level package, found without importing it."""
    top = entry.partition(":")[0].split(".")[0]
    spec = importlib.util.find_spec(top)
    if spec is None or spec.origin in (None, "built-in", "frozen"):
        return None
    origin = Path(spec.origin).resolve()
    return str(origin.parent.parent if origin.name == "__init__.py" else origin.parent)


def _outside(path: str, prefixes: tuple[str, ...]) -> bool:
    return not any(path == p or path.startswith(p.rstrip("/") + "/") for p in (*prefixes, "/usr"))


def normalize(result: Any) -> StageOutput:
    """The plugin's return value as a final output; internal_error for anything malformed."""
    detail: dict[str, Any] = {}
    status: Status | None = None
    score: Any = result
    if isinstance(result, dict):
        score = result.get("score")
        if result.get("status") is not None:
            if result["status"] not in _STATUSES:
                return _plugin_error(f"status {result['status']!r} is not one of {sorted(_STATUSES)}")
            status = Status(result["status"])
        if result.get("detail") is not None:
            if not isinstance(result["detail"], dict):
                return _plugin_error("detail must be an object")
            detail = dict(result["detail"])
    if isinstance(score, bool):
        score = 1.0 if score else 0.0
    if not isinstance(score, (int, float)) or not math.isfinite(score):
        return _plugin_error(f"returned {snippet(repr(result), 200)}; expected a finite number, bool or dict")
    if status is None:
        status = Status.OK if score > 0 else Status.WRONG_ANSWER
    return StageOutput.final(status, float(score), **detail)


def _plugin_error(message: str, **extra: Any) -> StageOutput:
    return StageOutput.final(
        Status.INTERNAL_ERROR, 0.0, error={"source": "plugin", "message": message}, **extra
    )


class PluginHandler:
    """Runs ``entry`` (``module:function``) on each request's payload in a fresh jailed child.

    What it needs to know once - the interpreter, the plugin package's directory, the child's
    program - it finds on first use and keeps."""

    def __init__(
        self, entry: str, sandbox: Sandbox | None = None, settings: PluginSettings | None = None
    ) -> None:
        self.entry = entry
        self._sandbox = sandbox
        self._settings = settings or PluginSettings()
        self.python = Interpreter(self._settings.python)
        self._root: str | None = None
        self._root_found = False
        self._child: bytes | None = None

    def root(self) -> str | None:
        """:func:`plugin_root` of the entry, found once."""
        if not self._root_found:
            self._root, self._root_found = plugin_root(self.entry), True
        return self._root

    def child_source(self) -> bytes:
        """``plugin_child.py``, read once."""
        if self._child is None:
            self._child = CHILD_SOURCE.read_bytes()
        return self._child

    def ready(self) -> tuple[bool, str]:
        try:
            self.python.get()
            if importlib.util.find_spec(self.entry.partition(":")[0].split(".")[0]) is None:
                return False, f"plugin {self.entry!r}: package not installed"
        except Exception as e:
            return False, f"plugin {self.entry!r} unusable: {e}"
        return True, ""

    def _zygote(self, sandbox: Sandbox, exe: str, mounts: Mounts) -> Zygote | None:
        if not self._settings.zygote or not isinstance(sandbox, LocalSandbox):
            return None
        return sandbox.zygote(exe, self.child_source().decode(), mounts)

    def run(self, inp: StageInput) -> StageOutput:
        exe, mounts = self.python.get()
        root = self.root()
        sys_path: list[str] = []
        if root is not None and _outside(root, mounts.ro_paths):
            mounts = Mounts(ro_paths=(*mounts.ro_paths, root), dev_paths=mounts.dev_paths, sys=mounts.sys)
            sys_path.append(root)
        timeout = min(self._settings.timeout_s, stage_budget(inp))
        limits = Limits(
            wall_s=timeout,
            cpu_s=timeout,
            memory_bytes=self._settings.memory_mb * MiB,
            nproc=32,
            fsize_bytes=16 * MiB,
            nofile=128,
            output_bytes=4 * MiB,
        )
        request = json.dumps({"entry": self.entry, "payload": inp.payload, "sys_path": sys_path})
        sandbox = self._sandbox or sandboxes.shared()
        zygote = self._zygote(sandbox, exe, mounts)
        with sandbox.session() as s:
            if zygote is not None and isinstance(s, LocalSession):
                r = run_forked(s, zygote, [], stdin=request.encode(), limits=limits)
            else:
                s.write_file("plugin_child.py", self.child_source())
                r = s.run(
                    [exe, "-I", "-B", "plugin_child.py"],
                    limits=limits,
                    stdin=request.encode(),
                    mounts=mounts,
                )
        if r.timed_out:
            return StageOutput.final(
                Status.TIMEOUT, 0.0, reason=f"plugin exceeded {timeout:.1f}s", plugin=self.entry
            )
        lines = r.stdout.decode("utf-8", errors="replace").strip().splitlines()
        try:
            reply = json.loads(lines[-1]) if lines else None
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            return _plugin_error(
                f"plugin child ended ({r.describe()}) without a reply", stderr=snippet(r.stderr, 2000)
            )
        if not reply.get("ok"):
            return _plugin_error(
                str(reply.get("error", "plugin failed")),
                traceback=snippet(str(reply.get("traceback", "")), 2000),
            )
        out = normalize(reply.get("result"))
        out.detail.setdefault("plugin", self.entry)
        return out
