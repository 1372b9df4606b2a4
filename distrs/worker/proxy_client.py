"""The worker's view of the proxy: lease, heartbeat, complete, release over HTTP.

Kept behind a small Protocol so the pull loop is tested with a fake of *this* wrapper, never of
the HTTP library. Transient failures (connection errors, 5xx, 429) raise ``ProxyUnavailable``;
the loop backs off and tries again. Every 5xx answer is logged (``proxy answered STATUS on PATH``)
wherever the loop handles it, so a worker's log accounts for each one.

Credentials: the client is given the deployment's shared worker token and, on its first call,
exchanges it for a credential of this worker's own (``POST /v1/workers/credential``, bound to the
worker id of that call; proxy/credentials.py), which every later call carries, so the leases it
takes are its alone. It renews the credential once half its lifetime has passed, on whichever call
comes next (heartbeats, long-polls), and exchanges again if the proxy says it expired or was
revoked. A proxy without the exchange route (404) keeps the shared token in use.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol

import httpx

log = logging.getLogger(__name__)


class ProxyUnavailable(Exception):
    pass


class LeaseRejected(Exception):
    """The proxy refused a heartbeat/complete (lease expired, unknown, or not ours)."""

    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"{status}: {body}")
        self.status, self.body = status, body


class ProxyClient(Protocol):
    def lease(self, stage: str, worker_id: str, wait_s: float) -> dict[str, Any] | None: ...

    def lease_bundle(self, stage: str, worker_id: str, wait_s: float, max_items: int) -> list[dict[str, Any]]:
        """Up to ``max_items`` leases (each with the ``heartbeat_s`` the proxy asks for); [] when
        there was nothing to do within ``wait_s``."""
        ...

    def heartbeat_bundle(self, lease_ids: list[str], worker_id: str) -> set[str]:
        """Extend several leases; returns the ids the proxy refused (expired, unknown, not ours)."""
        ...

    def complete_bundle(self, worker_id: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Complete several leases; per item the proxy's answer (``error`` when refused)."""
        ...

    def heartbeat(self, lease_id: str, worker_id: str) -> None: ...

    def complete(self, lease_id: str, body: dict[str, Any]) -> dict[str, Any]: ...

    def release(self, lease_id: str, worker_id: str) -> None: ...

    def close(self) -> None: ...


CREDENTIAL_PATH = "/v1/workers/credential"


class HttpProxyClient:
    def __init__(
        self, url: str, token: str | None = None, timeout_s: float = 30.0, clock: Any = time.monotonic
    ) -> None:
        self._token = token
        self._http = httpx.Client(base_url=url.rstrip("/"), timeout=timeout_s)
        self._clock = clock
        self._credential: str | None = None  # this worker's own, once exchanged
        self._worker_id: str | None = None
        self._renew_at = 0.0
        self._exchange = token is not None  # False once the proxy has no exchange route

    @property
    def credential(self) -> str | None:
        """The worker's own credential in use (None before the exchange or without one)."""
        return self._credential

    def _auth(self) -> dict[str, str]:
        token = self._credential or self._token
        return {"Authorization": f"Bearer {token}"} if token else {}

    def _send(self, path: str, body: dict[str, Any], timeout: Any) -> httpx.Response:
        try:
            return self._http.post(path, json=body, timeout=timeout, headers=self._auth())
        except httpx.HTTPError as exc:
            raise ProxyUnavailable(str(exc)) from exc

    def _ensure_credential(self, worker_id: str) -> None:
        """Exchange the shared token (first call, or after a refusal), or renew when due."""
        if not self._exchange:
            return
        if self._credential is not None and self._worker_id == worker_id and self._clock() < self._renew_at:
            return
        if self._worker_id != worker_id:
            self._credential = None  # a credential speaks for one worker id only
        r = self._send(CREDENTIAL_PATH, {"worker_id": worker_id}, 5.0)
        if r.status_code in (401, 403) and self._credential is not None:  # expired or revoked
            self._credential = None
            r = self._send(CREDENTIAL_PATH, {"worker_id": worker_id}, 5.0)
        if r.status_code == 404:  # an older proxy: the shared token it is
            self._exchange = False
            return
        if r.status_code >= 500:
            log.warning("proxy answered %d on %s", r.status_code, CREDENTIAL_PATH)
        if r.status_code >= 500 or r.status_code == 429:
            if self._credential is not None:
                return  # keep the one we have; the next call tries again
            raise ProxyUnavailable(f"credential exchange: {r.status_code}: {r.text[:200]}")
        if r.status_code not in (200, 201):
            raise LeaseRejected(r.status_code, r.text)
        data = r.json()
        self._credential, self._worker_id = str(data["credential"]), worker_id
        self._renew_at = self._clock() + float(data.get("renew_s") or data["ttl_s"] / 2)

    def _post(self, path: str, body: dict[str, Any], timeout: float | None = None) -> httpx.Response:
        worker_id = body.get("worker_id")
        if isinstance(worker_id, str):
            self._ensure_credential(worker_id)
        r = self._send(path, body, timeout or self._http.timeout)
        if r.status_code == 401 and self._credential is not None and isinstance(worker_id, str):
            self._credential = None  # expired or revoked: exchange again, once
            self._ensure_credential(worker_id)
            r = self._send(path, body, timeout or self._http.timeout)
        if r.status_code >= 500:
            log.warning("proxy answered %d on %s", r.status_code, path)
        if r.status_code >= 500 or r.status_code == 429:
            raise ProxyUnavailable(f"{r.status_code}: {r.text[:200]}")
        return r

    def lease(self, stage: str, worker_id: str, wait_s: float) -> dict[str, Any] | None:
        r = self._post("/v1/leases", {"stage": stage, "worker_id": worker_id, "wait_s": wait_s}, wait_s + 10)
        if r.status_code == 204:
            return None
        if r.status_code != 200:
            raise LeaseRejected(r.status_code, r.text)
        out: dict[str, Any] = r.json()
        return out

    def lease_bundle(self, stage: str, worker_id: str, wait_s: float, max_items: int) -> list[dict[str, Any]]:
        body = {"stage": stage, "worker_id": worker_id, "wait_s": wait_s, "max_items": max_items}
        r = self._post("/v1/leases/bundle", body, wait_s + 10)
        if r.status_code == 204:
            return []
        if r.status_code != 200:
            raise LeaseRejected(r.status_code, r.text)
        data: dict[str, Any] = r.json()
        leases: list[dict[str, Any]] = data["leases"]
        for lease in leases:
            lease["heartbeat_s"] = data.get("heartbeat_s")
        return leases

    def heartbeat_bundle(self, lease_ids: list[str], worker_id: str) -> set[str]:
        r = self._post("/v1/leases/heartbeat", {"worker_id": worker_id, "lease_ids": lease_ids}, timeout=2.0)
        if r.status_code != 200:
            raise LeaseRejected(r.status_code, r.text)
        return set(r.json().get("errors") or {})

    def complete_bundle(self, worker_id: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        r = self._post("/v1/leases/complete", {"worker_id": worker_id, "items": items})
        if r.status_code != 200:
            raise LeaseRejected(r.status_code, r.text)
        out: list[dict[str, Any]] = r.json()["items"]
        return out

    def heartbeat(self, lease_id: str, worker_id: str) -> None:
        # short timeout: a beat stuck behind a slow proxy must not hold up the next one
        r = self._post(f"/v1/leases/{lease_id}/heartbeat", {"worker_id": worker_id}, timeout=2.0)
        if r.status_code != 200:
            raise LeaseRejected(r.status_code, r.text)

    def complete(self, lease_id: str, body: dict[str, Any]) -> dict[str, Any]:
        r = self._post(f"/v1/leases/{lease_id}/complete", body)
        if r.status_code != 200:
            raise LeaseRejected(r.status_code, r.text)
        out: dict[str, Any] = r.json()
        return out

    def release(self, lease_id: str, worker_id: str) -> None:
        r = self._post(f"/v1/leases/{lease_id}/release", {"worker_id": worker_id})
        if r.status_code != 200:
            raise LeaseRejected(r.status_code, r.text)

    def close(self) -> None:
        self._http.close()
