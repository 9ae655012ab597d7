"""A real HTTP server receiving alert webhooks, as a team's endpoint would, started by the tests.

It records every POST (headers and body) and answers each with the next status of ``script``
(then 200); ``delay`` makes it answer late. ``verify`` checks a request's signature the way the
docs/alerts.md tells receivers to, independently of the code that signs.
"""

import hashlib
import hmac
import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> dict:
        return json.loads(self.body)


def verify(secret: str, received: Received, *, tolerance: float = 300) -> bool:
    """The receiver's check (docs/alerts.md): HMAC-SHA256 of "<timestamp>.<body>", compared in
    constant time, and a timestamp within five minutes (a replayed old request is refused)."""
    timestamp = received.headers.get("X-Feedback-Timestamp", "")
    expected = (
        "sha256=" + hmac.new(secret.encode(), timestamp.encode() + b"." + received.body, hashlib.sha256).hexdigest()
    )
    fresh = timestamp.isdigit() and abs(time.time() - int(timestamp)) < tolerance
    return fresh and hmac.compare_digest(expected, received.headers.get("X-Feedback-Signature", ""))


class WebhookReceiver:
    def __init__(self) -> None:
        self.received: list[Received] = []
        self.script: list[int] = []
        self.delay = 0.0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet test output
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver._lock:
                    receiver.received.append(Received(dict(self.headers.items()), body))
                    status = receiver.script.pop(0) if receiver.script else 200
                time.sleep(receiver.delay)
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the sender gave up waiting (a timeout test)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hooks/alerts"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> "WebhookReceiver":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def wait_for(self, count: int, timeout: float = 30) -> list[Received]:
        """The requests received, once there are ``count`` (for a receiver a worker process posts to)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.received) >= count:
                    return list(self.received)
            time.sleep(0.05)
        raise AssertionError(f"{len(self.received)} webhook requests after {timeout} s, expected {count}")
