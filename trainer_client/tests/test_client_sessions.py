"""The session helper: typed exec results, safe retries (one exec id per exec), ended sessions as
errors, ``open`` blocks that delete; against a fake transport and against the real service."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from distrs_client import (
    AsyncSessionClient,
    ExecResult,
    NotFoundError,
    RetryPolicy,
    SessionClient,
    SessionGoneError,
)
from distrs_client.transport import Response

FAST = RetryPolicy(initial_delay_s=0.0, max_delay_s=0.0, max_elapsed_s=5.0)
OK_EXEC = {
    "stdout": "hi\n",
    "stderr": "",
    "value": "42",
    "error": None,
    "exit_code": None,
    "duration_s": 0.01,
    "state_survived": True,
}


class Scripted:
    """A Transport answering from a script of (status, body) per call, recording each call."""

    def __init__(self, answers: list[tuple[int, Any]]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, str, Any]] = []

    async def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> Response:
        self.calls.append((method, path, body))
        status, out = self.answers.pop(0) if self.answers else (204, None)
        return Response(status, out)

    async def aclose(self) -> None:
        return None


def error(status: int, code: str) -> tuple[int, Any]:
    return status, {"error": {"code": code, "message": code, "details": {}}}


async def test_exec_result_is_typed_and_a_retried_exec_keeps_its_id() -> None:
    t = Scripted([(201, {"session_id": "s1"}), error(503, "store_unavailable"), (200, OK_EXEC)])
    client = AsyncSessionClient(transport=t, retry=FAST)
    s = await client.create("task", "python", files={"b.bin": b"\x00\x01", "t.txt": "x"})
    r = await s.exec("print('hi')\n42")
    assert isinstance(r, ExecResult) and r.value == "42" and r.stdout == "hi\n" and r.ok
    first, second = (c[2] for c in t.calls[1:])
    assert first["exec_id"] == second["exec_id"]  # the retry is the same exec: run once at most
    assert t.calls[0][2]["files"]["b.bin"] == {"content": "AAE=", "encoding": "base64"}


async def test_an_ended_session_raises_with_its_code_and_open_deletes() -> None:
    t = Scripted([(201, {"session_id": "s1"}), error(410, "session_lost"), (204, None)])
    client = AsyncSessionClient(transport=t, retry=FAST)
    with pytest.raises(SessionGoneError) as e:
        async with client.open("task") as s:
            await s.exec("x")
    assert e.value.code == "session_lost" and e.value.status == 410
    assert t.calls[-1][:2] == ("DELETE", "/v1/sessions/s1")  # left the block: deleted


def test_error_of_a_python_cell_and_bash_status() -> None:
    r = ExecResult.from_json(
        {**OK_EXEC, "value": None, "error": {"type": "NameError", "message": "x", "traceback": "tb"}}
    )
    assert r.error is not None and r.error.type == "NameError" and not r.ok
    assert not ExecResult.from_json({**OK_EXEC, "exit_code": 2}).ok


service = pytest.importorskip("tests.fixtures.service")


@pytest.fixture(scope="module")
def svc() -> Iterator[Any]:
    env = {"DISTRS_SANDBOX_UID_BASE": "64100", "DISTRS_SANDBOX_UID_COUNT": "16"}
    with service.running_service(env=env) as s:
        s.start_session_worker()
        yield s


def test_sync_multi_turn_against_the_service(svc: Any) -> None:
    with SessionClient(svc.url, service.TRAINER_A) as sessions:
        with sessions.open("task", "python", files={"in.bin": b"\xff\x00"}) as s:
            assert s.exec("data = open('in.bin', 'rb').read()").ok
            assert s.exec("len(data)").value == "2"
            s.write_files({"out/a.txt": "made", "raw.bin": b"\x01"})
            assert s.read_file("out/a.txt") == b"made" and s.read_file("raw.bin") == b"\x01"
            assert s.exec("1/0").error.type == "ZeroDivisionError"  # type: ignore[union-attr]
            reward = s.reward([{"code": "assert len(data) == 2"}, {"code": "assert False"}])
            assert reward["score"] == 0.5
            assert {"name": "data", "type": "bytes"} in s.state()["kernel"]["globals"]
            sid = s.session_id
        with pytest.raises(NotFoundError) as e:
            sessions.session(sid).exec("data")
        assert e.value.code == "session_deleted"


def test_async_sessions_in_parallel_keep_their_own_state(svc: Any) -> None:
    async def main() -> list[str | None]:
        async with AsyncSessionClient(svc.url, service.TRAINER_A) as sessions:

            async def one(i: int) -> str | None:
                async with sessions.open("task", "bash") as s:
                    await s.exec(f"N={i}; cd /tmp")
                    return (await s.exec("echo $N $(pwd)")).stdout

            return await asyncio.gather(*(one(i) for i in range(4)))

    assert asyncio.run(main()) == [f"{i} /tmp\n" for i in range(4)]
