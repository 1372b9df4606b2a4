"""The worker's view of the proxy: lease, heartbeat, complete, release over HTTP.

Kept behind a small Protocol so the pull loop is tested with a fake of *this* wrapper, never of
the HTTP library. Transient failures (connection errors, 5xx, 429) raise ``ProxyUnavailable``;
the loop backs off and tries again.
"""

from __future__ import annotations

from typing import Any, Protocol

import httpx


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


class HttpProxyClient:
    def __init__(self, url: str, token: str | None = None, timeout_s: float = 30.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout_s)

    def _post(self, path: str, body: dict[str, Any], timeout: float | None = None) -> httpx.Response:
        try:
            r = self._http.post(path, json=body, timeout=timeout or self._http.timeout)
        except httpx.HTTPError as exc:
            raise ProxyUnavailable(str(exc)) from exc
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
