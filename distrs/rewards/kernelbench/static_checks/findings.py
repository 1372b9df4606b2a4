"""What the static checks report: findings by check code, rejections apart from flags."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

REJECTION_CHECKS = (
    "syntax_error",
    "no_model_new",
    "no_custom_kernel",
    "kernel_not_called",
    "try_except_fallback",
    "reference_fallback",
    "extra_stream",
    "threads",
    "tampering",
    "tensor_subclass",
)
FLAG_CHECKS = ("possible_cache", "torch_ops_in_forward", "torch_ops_in_extension", "redefines_model")


@dataclass(frozen=True)
class Finding:
    """One static finding: a stable snake_case ``check`` code and a sentence saying what and where."""

    check: str
    why: str


@dataclass(frozen=True)
class StaticReport:
    """What :func:`check_source` found; ``ok`` when nothing forces a score of 0."""

    rejections: tuple[Finding, ...]
    flags: tuple[Finding, ...]
    kernel_names: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.rejections


def _where(nodes: Iterable[int]) -> str:
    ls = sorted(set(nodes))
    return ("line " if len(ls) == 1 else "lines ") + ", ".join(str(n) for n in ls)


@dataclass
class Collector:
    """Findings keyed by (check, what) with the lines each was seen on, in first-seen order."""

    items: dict[tuple[str, str], list[int]] = field(default_factory=dict)

    def add(self, check: str, what: str, line: int | None) -> None:
        lines = self.items.setdefault((check, what), [])
        if line is not None:
            lines.append(line)

    def findings(self, checks: Iterable[str]) -> tuple[Finding, ...]:
        wanted = set(checks)
        out = []
        for (check, what), lines in self.items.items():
            if check in wanted:
                out.append(Finding(check, f"{what} ({_where(lines)})." if lines else f"{what}."))
        order = {c: i for i, c in enumerate([*REJECTION_CHECKS, *FLAG_CHECKS])}
        return tuple(sorted(out, key=lambda f: order.get(f.check, len(order))))
