"""Connection-level abuse against a real ``distrs proxy`` process (uvicorn, loopback): a 100 MB
request header, a slowloris client and an idle keep-alive connection. Bounds in these tests are
generous caps that keep a broken build from hanging, not timing assertions. Each refusal must
come with the status line docs/security.md documents (431, 408), not merely a closed socket."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.fixtures.service import Service, running_service

ENV = {"DISTRS_MAX_HEADER_BYTES": "16384", "DISTRS_HEADER_TIMEOUT_S": "1", "DISTRS_IDLE_TIMEOUT_S": "1"}


@pytest.fixture(scope="module")
def proxy() -> Iterator[Service]:
    with running_service(env=ENV) as svc:
        yield svc


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def connect(svc: Service) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", svc.port), timeout=5)
    s.settimeout(0.05)
    return s


def closed_by_peer(s: socket.socket) -> tuple[bool, bytes]:
    """(whether the server closed the connection, what it sent before)."""
    got = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return True, got
            got += chunk
    except (TimeoutError, BlockingIOError):
        return False, got
    except (ConnectionResetError, BrokenPipeError):
        return True, got


def test_a_100mb_header_is_refused_without_being_read(proxy: Service) -> None:
    assert proxy.proxy_proc is not None
    before = rss_kb(proxy.proxy_proc.pid)
    s = connect(proxy)
    sent, chunk = 0, b"a" * (1 << 20)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ")
    s.settimeout(5)
    with contextlib.suppress(BrokenPipeError, ConnectionResetError, TimeoutError):
        while sent < 100 << 20:
            s.sendall(chunk)
            sent += len(chunk)
    assert sent < 100 << 20, "the whole 100 MB header was accepted"
    s.settimeout(0.05)
    closed, reply = closed_by_peer(s)
    s.close()
    assert closed
    assert reply.startswith(b"HTTP/1.1 431 "), reply[:200]
    assert b'"code": "headers_too_large"' in reply
    assert rss_kb(proxy.proxy_proc.pid) - before < 32 * 1024  # far below the 100 MB sent at it
    assert httpx.get(f"{proxy.url}/healthz").status_code == 200


def test_a_header_just_over_the_limit_gets_431(proxy: Service) -> None:
    s = connect(proxy)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n")
    s.settimeout(5)
    reply = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := s.recv(65536):
            reply += chunk
    s.close()
    assert reply.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"), reply[:200]
    assert b"connection: close" in reply


def test_a_large_but_allowed_header_still_works(proxy: Service) -> None:
    r = httpx.get(f"{proxy.url}/healthz", headers={"X-Fine": "a" * 8000})
    assert r.status_code == 200


def test_a_slowloris_connection_is_closed(proxy: Service) -> None:
    s = connect(proxy)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    deadline = time.monotonic() + 60  # a cap only: the server's limit is 1 s
    closed, reply = False, b""
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        while not closed and time.monotonic() < deadline:
            s.sendall(b"X")  # one more header byte, forever
            closed, got = closed_by_peer(s)
            reply += got
            time.sleep(0.2)
        closed = closed or closed_by_peer(s)[0]
    if not closed:  # a write can fail before the read sees the close
        closed = True if s.fileno() == -1 else closed_by_peer(s)[0]
    s.close()
    assert closed, "a client sending one header byte at a time kept its connection"
    assert reply.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), reply[:200]
    assert b'"code": "header_timeout"' in reply


def test_a_silent_connection_and_an_idle_keep_alive_connection_are_closed(proxy: Service) -> None:
    silent = connect(proxy)  # opens and never sends a byte
    idle = connect(proxy)
    idle.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    deadline = time.monotonic() + 60
    done: dict[str, bool] = {"silent": False, "idle": False}
    replies = {"silent": b"", "idle": b""}
    while not all(done.values()) and time.monotonic() < deadline:
        for name, s in (("silent", silent), ("idle", idle)):
            if not done[name]:
                done[name], got = closed_by_peer(s)
                replies[name] += got
        time.sleep(0.1)
    silent.close()
    idle.close()
    assert done == {"silent": True, "idle": True}
    assert replies["idle"].startswith(b"HTTP/1.1 200")
    assert b"HTTP/1.1 408" not in replies["idle"]  # between requests the idle timeout applies
    assert replies["silent"].startswith(b"HTTP/1.1 408 Request Timeout\r\n"), replies["silent"][:200]
