"""``make demo``'s per-batch table reads whole in an 80-column terminal."""

from __future__ import annotations

from rich.console import Console

from distrs.replay.driver import BatchReport
from distrs.replay.report import batch_table, status_counts


def render(width: int) -> list[str]:
    reports = [
        BatchReport(
            task="tenant-a/cuda-kernels",
            batch_id=f"step-{i}",
            size=64,
            extra_delay_s=0.42 + i,
            busy_s={"compile": 812.5, "execute": 1210.25},
            statuses={"ok": 40, "compile_error": 12, "runtime_error": 5, "timeout": 4, "wrong_answer": 3},
        )
        for i in range(3)
    ]
    console = Console(width=width, record=True, force_terminal=False, color_system=None)
    console.print(batch_table(reports, ["compile", "execute"], {"compile": 900.0, "execute": 1500.0}))
    return console.export_text().splitlines()


def test_fits_80_columns_without_cutting_statuses() -> None:
    lines = render(80)
    assert all(len(line) <= 80 for line in lines)
    text = "\n".join(lines)
    assert "…" not in text  # nothing truncated with an ellipsis
    assert all(part in text.split() for part in ("ok=40", "CE=12", "RE=5", "TLE=4", "WA=3"))
    assert "CE compile_error" in text.replace("\n", " ")  # the legend explains the short names


def test_status_counts_order_and_names() -> None:
    assert status_counts({"timeout": 1, "ok": 2, "internal_error": 3}) == "ok=2 ERR=3 TLE=1"
    assert status_counts({"something_new": 1}) == "something_new=1"
