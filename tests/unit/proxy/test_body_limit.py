"""BodyLimit at the ASGI level: a declared oversize body and a streamed (chunked) one are both
refused with 413; a body within its Content-Length passes through untouched."""

from __future__ import annotations

from typing import Any

import orjson

from distrs.proxy.app import BodyLimit

LIMIT = 100


async def _run(headers: list[tuple[bytes, bytes]], chunks: list[bytes]) -> tuple[list[dict[str, Any]], bytes]:
    """Drive BodyLimit over an app that reads the whole body and echoes its length."""
    msgs = [
        {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)
    ]
    sent: list[dict[str, Any]] = []
    read = bytearray()

    async def receive() -> dict[str, Any]:
        return msgs.pop(0)

    async def send(msg: dict[str, Any]) -> None:
        sent.append(msg)

    async def app(scope: dict[str, Any], recv: Any, snd: Any) -> None:
        while True:
            m = await recv()
            read.extend(m.get("body", b""))
            if not m.get("more_body"):
                break
        await snd({"type": "http.response.start", "status": 200, "headers": []})
        await snd({"type": "http.response.body", "body": str(len(read)).encode()})

    await BodyLimit(app, LIMIT)({"type": "http", "headers": headers}, receive, send)
    return sent, bytes(read)


async def test_declared_oversize_body_is_413_unread() -> None:
    sent, read = await _run([(b"content-length", b"101")], [b"x" * 101])
    assert sent[0]["status"] == 413 and read == b""
    assert orjson.loads(sent[1]["body"])["error"]["code"] == "body_too_large"


async def test_streamed_body_past_the_limit_is_413() -> None:
    sent, _ = await _run([(b"transfer-encoding", b"chunked")], [b"x" * 60, b"x" * 60])
    assert sent[0]["status"] == 413
    assert orjson.loads(sent[1]["body"])["error"]["code"] == "body_too_large"


async def test_body_within_its_length_passes_whole() -> None:
    sent, read = await _run([(b"content-length", b"100")], [b"y" * 100])
    assert sent[0]["status"] == 200 and read == b"y" * 100 and sent[1]["body"] == b"100"


async def test_streamed_body_within_the_limit_passes_whole() -> None:
    sent, read = await _run([(b"transfer-encoding", b"chunked")], [b"z" * 50, b"z" * 50])
    assert sent[0]["status"] == 200 and read == b"z" * 100
