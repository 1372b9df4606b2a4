"""Bearer-token authentication with roles trainer (tenant-scoped), worker and admin.

Tokens come from a YAML/JSON file (the chart mounts a Secret) or an inline ``TOKEN:ROLE[:TENANT]``
list; ``--insecure`` makes every caller an admin of tenant ``default`` for local demos. Token
comparison is constant-time.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import yaml


class Role(StrEnum):
    TRAINER = "trainer"
    WORKER = "worker"
    ADMIN = "admin"


@dataclass(frozen=True)
class Principal:
    role: Role
    tenant: str = "default"

    def can_see(self, tenant: str) -> bool:
        return self.role is Role.ADMIN or self.tenant == tenant


INSECURE = Principal(Role.ADMIN, "default")


class TokenTable:
    def __init__(self, entries: dict[str, Principal]) -> None:
        self._entries = entries

    def __len__(self) -> int:
        return len(self._entries)

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
            out[parts[0]] = Principal(Role(parts[1]), parts[2] if len(parts) == 3 else "default")
        return out

    @classmethod
    def load(cls, file: str | None, inline: str | None) -> TokenTable:
        entries: dict[str, Principal] = {}
        if file:
            data = yaml.safe_load(Path(file).read_text()) or []
            for i, e in enumerate(data):
                if not isinstance(e, dict) or "token" not in e or "role" not in e:
                    raise ValueError(f"{file}: entry {i} needs 'token' and 'role'")
                entries[str(e["token"])] = Principal(Role(e["role"]), str(e.get("tenant", "default")))
        if inline:
            entries.update(cls.parse_inline(inline))
        return cls(entries)
