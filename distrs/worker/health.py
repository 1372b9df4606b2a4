"""A tiny HTTP endpoint for kubelet probes: /healthz (alive) and /readyz (can serve now), and the
worker's own /metrics (GPU gauges and GPU-seconds of an execute worker, ``WorkerMetrics``).

Standard library plus prometheus_client's exposition: it runs in a daemon thread beside the
synchronous pull loop.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


def serve_health(
    port: int,
    readiness: Callable[[], tuple[bool, str]],
    host: str = "0.0.0.0",
    registry: CollectorRegistry | None = None,
) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body: dict[str, object]
            if self.path == "/metrics" and registry is not None:
                self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
                return
            if self.path == "/healthz":
                code, body = 200, {"status": "ok"}
            elif self.path == "/readyz":
                ok, why = readiness()
                code, body = (200 if ok else 503), {"ready": ok, "reason": why}
            else:
                code, body = 404, {"error": "not found"}
            self._send(code, json.dumps(body).encode(), "application/json")

        def _send(self, code: int, data: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            return None

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
