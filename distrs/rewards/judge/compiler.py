"""Running a judged program's compiler in a sandbox session: the binary, or the final result
(``compile_error``, or ``timeout`` at stage ``compile``) when it fails."""

from __future__ import annotations

from collections.abc import Sequence

from distrs.core.model import Status
from distrs.rewards.base import MAX_BINARY_BYTES, MiB, StageOutput, snippet
from distrs.sandbox import Limits, Mounts, RunResult, Session


def compile_program(
    session: Session,
    argv: Sequence[str],
    output_name: str,
    *,
    timeout_s: float,
    memory_mb: int,
    env: dict[str, str] | None = None,
    mounts: Mounts | None = None,
) -> tuple[StageOutput | None, bytes | None, RunResult]:
    """Run a compiler; (final output on failure, binary on success, the run)."""
    limits = Limits(
        wall_s=timeout_s,
        cpu_s=timeout_s,
        memory_bytes=memory_mb * MiB,
        nproc=128,
        fsize_bytes=256 * MiB,
        nofile=512,
        output_bytes=256 * 1024,
        tmpfs_bytes=256 * MiB,
    )
    r = session.run(argv, limits=limits, env=env, mounts=mounts)
    compiler_output = snippet(r.stderr + r.stdout, 8000)
    if r.timed_out:
        return (
            StageOutput.final(
                Status.TIMEOUT, 0.0, stage="compile", reason=r.describe(), compiler_output=compiler_output
            ),
            None,
            r,
        )
    if not r.ok:
        return (
            StageOutput.final(
                Status.COMPILE_ERROR, 0.0, reason=r.describe(), compiler_output=compiler_output
            ),
            None,
            r,
        )
    binary = session.read_file(output_name, MAX_BINARY_BYTES)
    if binary is None:
        return (
            StageOutput.final(
                Status.COMPILE_ERROR,
                0.0,
                reason=f"compiler produced no binary of at most {MAX_BINARY_BYTES} bytes",
                compiler_output=compiler_output,
            ),
            None,
            r,
        )
    return None, binary, r
