"""A local OpenAI-compatible HTTP server for tests: real sockets, real SDK on the other side.

Replies come from a script (a list consumed in order) or from a function of the request, so
a test can stage 429s, 500s, slow replies, malformed tool calls and servers without tools. Each
request's body is kept in ``requests``, with its path and headers in ``received``.
"""

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def completion(content: str = "", tool_calls: list[dict] | None = None, usage=(12, 7)) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if tool_calls:
        message["tool_calls"] = [
            {
                "id": call.get("id", f"call_{i}"),
                "type": "function",
                "function": {"name": call["name"], "arguments": call["arguments"]},
            }
            for i, call in enumerate(tool_calls)
        ]
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "test-model",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if tool_calls else "stop"}],
        "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)},
    }


def call(name: str, arguments: Any, id: str | None = None) -> dict:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"name": name, "arguments": raw, **({"id": id} if id else {})}


def error(status: int, message: str = "error") -> dict:
    return {"status": status, "json": {"error": {"message": message, "type": "server_error", "code": status}}}


class FakeOpenAI:
    def __init__(self, port: int = 0) -> None:
        self.script: list[dict] = []
        self.responder: Callable[[dict], dict] | None = None
        self.requests: list[dict] = []
        self.received: list[tuple[str, dict[str, str]]] = []  # (path, headers) of each POST
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet test output
                pass

            def do_GET(self):
                if self.path.startswith("/slow"):
                    time.sleep(0.3)
                self._send(200, {"path": self.path, "temperature": 21})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with server._lock:
                    server.requests.append(body)
                    server.received.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                    step = server.script.pop(0) if server.script else None
                if step is None and server.responder is not None:
                    step = server.responder(body)
                if step is None:
                    step = {"json": completion("(the script is empty)")}
                if "json" not in step and "raw" not in step and "status" not in step:
                    step = {"json": step}
                time.sleep(step.get("delay", 0))
                if "raw" in step:
                    self._send(step.get("status", 200), step["raw"], raw=True)
                else:
                    self._send(step.get("status", 200), step["json"])

            def _send(self, status, payload, raw=False):
                data = payload.encode() if raw else json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> "FakeOpenAI":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@contextmanager
def model_writing(settings, reply: str) -> Iterator["FakeOpenAI"]:
    """An endpoint that answers every request with ``reply``, configured as the product's model."""
    with FakeOpenAI() as endpoint:
        settings.LLM_BACKEND = "openai"
        settings.OPENAI_BASE_URL = endpoint.base_url
        endpoint.responder = lambda body: completion(reply)
        yield endpoint


def embeddings(count: int, dimensions: int = 3) -> dict:
    """An embeddings answer: vector i points along axis i % dimensions."""
    vectors = [[1.0 if d == i % dimensions else 0.0 for d in range(dimensions)] for i in range(count)]
    return {
        "object": "list",
        "model": "test-embeddings",
        "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)],
        "usage": {"prompt_tokens": count, "total_tokens": count},
    }
