"""Bearer-token authentication with roles trainer (tenant-scoped), worker, metrics and admin,
and the tenant scoping of task names.

Tokens come from a YAML/JSON file (the chart mounts a Secret) or an inline ``TOKEN:ROLE[:TENANT]``
list; ``--insecure`` makes every caller an admin of tenant ``default`` for local demos. Token
comparison is constant-time.

Tasks belong to tenants: the proxy never hands a caller's task name to the store as is, but as
``TENANT/TASK`` (``scoped_task``), and maps it back in every response (``public_task``). Ids
cannot contain ``/`` (``schemas.ID_PATTERN``) and neither can tenant names (checked when tokens
load), so the scoped name is unambiguous and two tenants' tasks of the same name never meet: no
tenant can name, see or block another's work. An admin acts for tenant ``default`` (its own) or,
with ``?tenant=NAME``, for any tenant.
"""

from __future__ import annotations

import hmac
import re
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import yaml


class Role(StrEnum):
    TRAINER = "trainer"
    WORKER = "worker"
    ADMIN = "admin"
    METRICS = "metrics"  # may read /metrics and nothing else (a Prometheus scrape token)


TENANT_PATTERN = re.compile(r"^[A-Za-z0-9._:@+=-]{1,200}$")
SCOPE_SEP = "/"


def scoped_task(tenant: str, task: str) -> str:
    """The store's name of ``tenant``'s task ``task``."""
    return f"{tenant}{SCOPE_SEP}{task}"


def public_task(name: str) -> str:
    """A task name as its tenant knows it (the store name without the tenant prefix)."""
    return name.split(SCOPE_SEP, 1)[1] if SCOPE_SEP in name else name


def check_tenant(tenant: str, where: str) -> str:
    if not TENANT_PATTERN.match(tenant):
        raise ValueError(f"{where}: tenant {tenant!r} must match {TENANT_PATTERN.pattern}")
    return tenant


@dataclass(frozen=True)
class Principal:
    role: Role
    tenant: str = "default"
    # Set for a worker's own credential (proxy/credentials.py): the worker id it is bound to and
    # the lease holder identity of its session.
    worker_id: str | None = None
    holder: str | None = None

    def can_see(self, tenant: str) -> bool:
        return self.role is Role.ADMIN or self.tenant == tenant

    def scope(self, task: str) -> str:
        """The store name of this principal's task ``task``."""
        return scoped_task(self.tenant, task)


INSECURE = Principal(Role.ADMIN, "default")


class TokenTable:
    def __init__(self, entries: dict[str, Principal]) -> None:
        self._entries = entries

    def __len__(self) -> int:
        return len(self._entries)

    def secrets(self) -> list[str]:
        """Every token (the material the per-worker credential key is derived from)."""
        return list(self._entries)

    def tenants(self) -> list[str]:
        """Every tenant a trainer or admin token acts for (``default`` included), sorted."""
        roles = (Role.TRAINER, Role.ADMIN)
        return sorted({"default"} | {p.tenant for p in self._entries.values() if p.role in roles})

    def lookup(self, token: str) -> Principal | None:
        found = None
        for known, principal in self._entries.items():  # no early exit: constant time in the table
            if hmac.compare_digest(known.encode(), token.encode()):
                found = principal
        return found

    @staticmethod
    def parse_inline(spec: str) -> dict[str, Principal]:
        out: dict[str, Principal] = {}
        for item in filter(None, (s.strip() for s in spec.split(","))):
            parts = item.split(":")
            if len(parts) not in (2, 3):
                raise ValueError(f"token entry {item!r}: expected TOKEN:ROLE[:TENANT]")
            tenant = (
                check_tenant(parts[2], f"token entry for role {parts[1]}") if len(parts) == 3 else "default"
            )
            out[parts[0]] = Principal(Role(parts[1]), tenant)
        return out

    @classmethod
    def load(cls, file: str | None, inline: str | None) -> TokenTable:
        entries: dict[str, Principal] = {}
        if file:
            data = yaml.safe_load(Path(file).read_text()) or []
            for i, e in enumerate(data):
                if not isinstance(e, dict) or "token" not in e or "role" not in e:
                    raise ValueError(f"{file}: entry {i} needs 'token' and 'role'")
                tenant = check_tenant(str(e.get("tenant", "default")), f"{file}: entry {i}")
                entries[str(e["token"])] = Principal(Role(e["role"]), tenant)
        if inline:
            entries.update(cls.parse_inline(inline))
        return cls(entries)
