"""Every Lua script of the store, with the names of its keys and arguments, declared once.

A script's own file (``lua/<name>.lua``, package data) reads its keys and arguments by name:
``K.<name>`` for each key, ``A.<name>`` for each argument, and ``L.<list>``, a table of rows
``{<name> = ...}``, for each list of items (the leases of a bundle, the requests of a
submission); never ``KEYS[i]`` or ``ARGV[i]``. The positions are decided here, in one place
(``Script``): when a script is loaded, ``K.<name>`` and ``A.<name>`` become the positions they
name (so a name its declaration lacks fails at load, not at run time, and reading a name costs
nothing), and a prelude builds the rows of ``L`` (``Script.prelude``). A call is built from the
same declaration (``Script.call``: typed tuples, one per script, checked by mypy), so Python and
Lua cannot disagree about a position. What a script returns is documented at the top of its
file.

The topology (``topology/``) loads each script for its mode, behind the mode's own functions
(``lua/standalone.lua`` or ``lua/cluster.lua``: where events, span samples, arrival sequences
and usage counts go, and whether a lease may take a queue's head), so ``lib.lua`` and the
scripts are the same in every mode; and runs it: EVALSHA, and EVAL when Redis lost its script
cache.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, Generic, NamedTuple, TypeVar

K = TypeVar("K", bound=tuple[Any, ...])
A = TypeVar("A", bound=tuple[Any, ...])

# ``K.<name>`` and ``A.<name>`` in a script's own file (``Script.resolve``).
_NAMED = re.compile(r"\b([KA])\.([A-Za-z_]\w*)")
# Lua keywords cannot name a key or an argument (``K.end`` would not parse).
_LUA_KEYWORDS = frozenset(
    [
        "and",
        "break",
        "do",
        "else",
        "elseif",
        "end",
        "false",
        "for",
        "function",
        "goto",
        "if",
        "in",
        "local",
        "nil",
        "not",
        "or",
        "repeat",
        "return",
        "then",
        "true",
        "until",
        "while",
    ]
)


@dataclass(frozen=True)
class Items:
    """A list of rows a script takes (of any length): ``row``'s first ``keys`` fields are keys,
    the others arguments."""

    name: str
    row: type[tuple[Any, ...]]
    keys: int

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(self.row._fields)  # type: ignore[attr-defined]


class Script(Generic[K, A]):
    """One Lua script: its name (``lua/<name>.lua``), the tuple types naming its keys and its
    arguments (``shared``: a second group of arguments it shares with other scripts, passed
    after its own), and its lists of items."""

    def __init__(
        self,
        name: str,
        keys: type[K],
        args: type[A],
        *lists: Items,
        shared: type[tuple[Any, ...]] | None = None,
    ) -> None:
        self.name = name
        self.key_names: tuple[str, ...] = tuple(keys._fields)  # type: ignore[attr-defined]
        self.arg_names: tuple[str, ...] = tuple(args._fields)  # type: ignore[attr-defined]
        if shared is not None:
            self.arg_names += tuple(shared._fields)  # type: ignore[attr-defined]
        self.lists = lists
        self._item_keys = tuple(it.keys for it in lists)
        for n in (*self.key_names, *self.arg_names, *(f for it in lists for f in it.fields)):
            if n in _LUA_KEYWORDS:
                raise ValueError(f"script {name}: {n!r} is a Lua keyword")

    def call(
        self, keys: K, args: A, *rows: Sequence[tuple[Any, ...]], shared: tuple[Any, ...] = ()
    ) -> tuple[list[str], list[Any]]:
        """KEYS and ARGV of one call: the fixed keys, then each list's item keys; the fixed
        arguments (its own, then the shared ones), each list's length, then each list's item
        arguments. The tuples' types are the script's (checked by mypy: ``Script[K, A]``)."""
        if len(rows) != len(self.lists):
            raise TypeError(f"script {self.name} takes {len(self.lists)} lists, got {len(rows)}")
        flat_keys: list[str] = [*keys]
        flat_args: list[Any] = [*args, *shared, *map(len, rows)]
        for n, items in zip(self._item_keys, rows, strict=True):
            for row in items:
                flat_keys += row[:n]
                flat_args += row[n:]
        return flat_keys, flat_args

    def resolve(self, lua: str) -> str:
        """``lua`` with each ``K.<name>`` and ``A.<name>`` replaced by the position it names;
        ValueError for a name this script does not declare."""
        positions = {
            "K": {n: f"KEYS[{i}]" for i, n in enumerate(self.key_names, 1)},
            "A": {n: f"ARGV[{i}]" for i, n in enumerate(self.arg_names, 1)},
        }

        def position(m: re.Match[str]) -> str:
            table, name = m.groups()
            got = positions[table].get(name)
            if got is None:
                raise ValueError(
                    f"lua/{self.name}.lua names {table}.{name}, which scripts.py does not declare"
                )
            return got

        return _NAMED.sub(position, lua)

    def prelude(self) -> str:
        """The Lua that builds the rows of this call's lists (module docstring)."""
        na = len(self.arg_names)
        out = ["local L = {}"]
        if self.lists:
            out.append(f"local distrs_ki, distrs_ai = {len(self.key_names) + 1}, {na + len(self.lists) + 1}")
        for j, spec in enumerate(self.lists):
            fields = spec.fields
            parts = [f"{f} = KEYS[distrs_ki + {i}]" for i, f in enumerate(fields[: spec.keys])]
            parts += [f"{f} = ARGV[distrs_ai + {i}]" for i, f in enumerate(fields[spec.keys :])]
            out += [
                f"L.{spec.name} = {{}}",
                f"for i = 1, tonumber(ARGV[{na + j + 1}]) do",
                f"  L.{spec.name}[i] = {{{', '.join(parts)}}}",
                f"  distrs_ki, distrs_ai = distrs_ki + {spec.keys}, distrs_ai + {len(fields) - spec.keys}",
                "end",
            ]
        return "\n".join(out) + "\n"

    def source(self, mode: str) -> tuple[str, str]:
        """The script for a mode, in two parts: what goes before its own code (the mode's
        functions, ``lua/<mode>.lua``, the prelude naming its keys and arguments, the shared
        library), and its own code (``lua/<name>.lua``); all package data."""
        head = lua_file(mode) + "\n" + self.prelude() + lua_file("lib") + "\n"
        return head, self.resolve(lua_file(self.name))


def lua_file(name: str) -> str:
    """``lua/<name>.lua`` (package data)."""
    return resources.files("distrs.store").joinpath("lua").joinpath(f"{name}.lua").read_text()


class NoKeys(NamedTuple):
    pass


class NoArgs(NamedTuple):
    pass


class RegisterKeys(NamedTuple):
    owner: str
    batch: str
    span: str
    events: str
    active: str
    members: str
    results: str
    queued: str
    profile: str
    history: str
    spans: str


class RegisterArgs(NamedTuple):
    tenant: str
    task: str
    batch_id: str
    size: int
    reward_type: str  # '' = none
    rollout: str  # rollout_started_at, '' = none
    now: str
    prior: str  # span prior of a task without history, '' = not computed yet
    maxlen: int


class SubmitKeys(NamedTuple):
    seq: str
    events: str
    stages: str


class SubmitArgs(NamedTuple):
    now: str
    policy: str
    maxlen: int
    chan_work: str
    u_queued: str
    u_bytes: str
    u_expiry: str
    u_totals: str


class SubmitGroup(NamedTuple):
    """The requests of one batch in a submission (``n`` of them follow in ``requests``)."""

    owner: str
    batch: str
    tenant: str
    task: str
    batch_id: str
    n: int


class SubmitRequest(NamedTuple):
    request: str
    queue: str  # of its first stage
    request_id: str
    reward_type: str
    stage: str  # its first stage
    payload: str
    route: str  # JSON [[stage, queue key], ...] of its whole route; '' when it has one stage


class LeaseKeys(NamedTuple):
    queue: str
    leases: str


class LeaseArgs(NamedTuple):
    now: str
    ttl: str
    worker: str
    stage: str
    holder: str


class NewLease(NamedTuple):
    lease: str
    lease_id: str


class GetLeaseKeys(NamedTuple):
    lease: str


class HeartbeatKeys(NamedTuple):
    leases: str


class HeartbeatArgs(NamedTuple):
    now: str
    ttl: str
    holder: str


class LeaseRef(NamedTuple):
    lease: str
    lease_id: str


class TransitionKeys(NamedTuple):
    leases: str
    events: str
    active: str
    stages: str


class TransitionArgs(NamedTuple):
    """What every transition that may finish requests takes (lib.lua ``transition``): the queue
    policy, the result TTL, history length, event stream length, the wake-up channels, and the
    four usage counter key prefixes (``Keys.usage_prefixes``; '' = the script hands the counts
    back)."""

    policy: str
    ttl: int
    history_k: int
    maxlen: int
    chan_work: str
    chan_result: str
    u_queued: str
    u_bytes: str
    u_expiry: str
    u_totals: str


class CompleteArgs(NamedTuple):
    now: str
    holder: str


class CompleteItem(NamedTuple):
    lease: str
    lease_id: str
    run_s: str
    outcome: str  # next | final
    artifacts: str  # JSON, '' = keep
    result: str  # Result JSON without request_id and stages ('' for next)
    status: str


class StoreRouteKeys(NamedTuple):
    request: str


class StoreRouteArgs(NamedTuple):
    route: str  # JSON [[stage, queue key], ...], as submit stores it


class ReleaseKeys(NamedTuple):
    lease: str
    leases: str
    stages: str


class ReleaseArgs(NamedTuple):
    now: str
    holder: str
    lease_id: str
    policy: str
    chan_work: str


class RequeueArgs(NamedTuple):
    now: str
    max_attempts: int
    limit: int


class MarkKeys(NamedTuple):
    gen: str


class ReadyMark(NamedTuple):
    ready: str
    task: str


class ReadyUnmark(NamedTuple):
    ready: str
    task: str
    gen: int


REGISTER_BATCH = Script("register_batch", RegisterKeys, RegisterArgs)
SUBMIT = Script(
    "submit", SubmitKeys, SubmitArgs, Items("groups", SubmitGroup, 2), Items("requests", SubmitRequest, 2)
)
LEASE = Script("lease", LeaseKeys, LeaseArgs, Items("new", NewLease, 1))
GET_LEASE = Script("get_lease", GetLeaseKeys, NoArgs)
HEARTBEAT = Script("heartbeat", HeartbeatKeys, HeartbeatArgs, Items("leases", LeaseRef, 1))
COMPLETE = Script(
    "complete", TransitionKeys, CompleteArgs, Items("items", CompleteItem, 1), shared=TransitionArgs
)
RELEASE = Script("release", ReleaseKeys, ReleaseArgs)
STORE_ROUTE = Script("store_route", StoreRouteKeys, StoreRouteArgs)
REQUEUE_EXPIRED = Script("requeue_expired", TransitionKeys, RequeueArgs, shared=TransitionArgs)
MARK_READY = Script("mark_ready", MarkKeys, NoArgs, Items("marks", ReadyMark, 1))
PRUNE_READY = Script("prune_ready", NoKeys, NoArgs, Items("unmarks", ReadyUnmark, 1))

SCRIPTS: tuple[Script[Any, Any], ...] = (
    REGISTER_BATCH,
    SUBMIT,
    LEASE,
    GET_LEASE,
    HEARTBEAT,
    COMPLETE,
    RELEASE,
    STORE_ROUTE,
    REQUEUE_EXPIRED,
    MARK_READY,
    PRUNE_READY,
)
