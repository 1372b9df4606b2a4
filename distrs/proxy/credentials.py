"""Per-worker credentials: a worker trades the deployment's shared worker token for its own.

Why: the chart gives every worker pod the same token, so "a lease belongs to the token that took
it" cannot tell one worker from another. A worker therefore exchanges the shared token
(``POST /v1/workers/credential``) for a credential of its own, bound to its ``worker_id``, and
leases belong to that credential: another worker (with its own credential, or the shared token)
gets 403 ``lease_not_yours``. Operators change nothing: the worker makes the exchange itself.

A credential is ``dwc1.<worker_id>.<session>.<started>.<expires>.<mac>`` (times in ms): stateless and signed
(HMAC-SHA256), so every proxy replica of a release verifies it without shared state. The key is
``worker_credential_secret`` when set, else derived from the tokens the proxy accepts (the
replicas of one release share them; rotating a token rotates the key). ``session`` is random at the exchange and kept by
renewals, so the leases a worker holds stay its own while its credential is renewed (the worker
renews with its heartbeats, well before ``expires``); ``started`` is when the session began.

Revocation (``DELETE /v1/workers/{worker_id}/credential``, admin) refuses every credential of
that worker whose session began at or before the revocation; the worker may exchange again and
starts a new session (its old leases are no longer its own and are requeued when they expire).
Revocations live in the proxy process that received them (with several proxy replicas, revoke on
each, or rotate the secret); they are kept for one credential TTL, after which every credential
they covered has expired anyway.

Pure logic: every method takes ``now``; the proxy passes its clock.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

PREFIX = "dwc1."


@dataclass(frozen=True)
class WorkerCredential:
    worker_id: str
    session: str
    started: float
    expires: float

    @property
    def holder(self) -> str:
        """The lease holder identity of this credential (kept by renewals)."""
        return f"wc-{self.session}"


class CredentialError(Exception):
    """A credential that is malformed, forged, expired or revoked; ``code`` says which."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def is_credential(token: str) -> bool:
    return token.startswith(PREFIX)


def derive_secret(tokens: list[str]) -> bytes:
    """The signing key when none is configured: a hash of every token the proxy accepts (secret
    material all replicas of a release share). Without any token (``--insecure``, where every
    caller is an admin anyway) a random key of this process: never a key anyone could compute."""
    if not tokens:
        return secrets.token_bytes(32)
    h = hashlib.sha256(b"distrs-worker-credential/1\0")
    for t in sorted(tokens):
        h.update(t.encode() + b"\0")
    return h.digest()


def _ms(t: float) -> int:
    """Times travel as whole milliseconds (a token field holds no dot)."""
    return round(t * 1000)


def _b64(s: str) -> str:
    return base64.urlsafe_b64encode(s.encode()).decode().rstrip("=")


def _unb64(s: str) -> str:
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4)).decode()


class CredentialIssuer:
    def __init__(self, secret: bytes, ttl_s: float) -> None:
        self._secret = secret
        self.ttl_s = ttl_s
        self._revoked: dict[str, float] = {}  # worker_id -> revoked at

    def _mac(self, body: str) -> str:
        return hmac.new(self._secret, body.encode(), hashlib.sha256).hexdigest()[:32]

    def issue(
        self, worker_id: str, now: float, renew: WorkerCredential | None = None
    ) -> tuple[str, WorkerCredential]:
        """A new credential for ``worker_id`` (a new session), or ``renew``'s session extended."""
        expires = _ms(now + self.ttl_s) / 1000
        if renew is not None:
            cred = WorkerCredential(worker_id, renew.session, renew.started, expires)
        else:
            cred = WorkerCredential(worker_id, secrets.token_hex(12), _ms(now) / 1000, expires)
        body = f"{PREFIX}{_b64(worker_id)}.{cred.session}.{_ms(cred.started)}.{_ms(cred.expires)}"
        return f"{body}.{self._mac(body)}", cred

    def verify(self, token: str, now: float) -> WorkerCredential:
        """The credential ``token`` carries; CredentialError when it cannot be used at ``now``."""
        body, _, mac = token.rpartition(".")
        if not body.startswith(PREFIX) or not hmac.compare_digest(self._mac(body), mac):
            raise CredentialError("unauthorized", "unknown token")
        try:
            wid, session, started, expires = body[len(PREFIX) :].split(".", 3)
            cred = WorkerCredential(_unb64(wid), session, int(started) / 1000, int(expires) / 1000)
        except ValueError as exc:  # signed by us, so only a format change could get here
            raise CredentialError("unauthorized", "malformed worker credential") from exc
        if now >= cred.expires:
            raise CredentialError(
                "credential_expired", "worker credential expired: exchange the worker token again"
            )
        revoked_at = self._revoked.get(cred.worker_id)
        if revoked_at is not None and cred.started <= revoked_at:
            raise CredentialError(
                "credential_revoked", f"the credentials of worker {cred.worker_id!r} were revoked"
            )
        return cred

    def revoke(self, worker_id: str, now: float) -> None:
        """Refuse every credential of ``worker_id`` whose session began at or before ``now``."""
        self._revoked = {w: t for w, t in self._revoked.items() if t > now - self.ttl_s}
        self._revoked[worker_id] = now
