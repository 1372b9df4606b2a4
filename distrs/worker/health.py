"""A tiny HTTP endpoint for kubelet probes: /healthz (alive) and /readyz (can serve now).

Standard library only: it runs in a daemon thread beside the synchronous pull loop.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def serve_health(
    port: int, readiness: Callable[[], tuple[bool, str]], host: str = "0.0.0.0"
) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body: dict[str, object]
            if self.path == "/healthz":
                code, body = 200, {"status": "ok"}
            elif self.path == "/readyz":
                ok, why = readiness()
                code, body = (200 if ok else 503), {"ready": ok, "reason": why}
            else:
                code, body = 404, {"error": "not found"}
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            return None

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
