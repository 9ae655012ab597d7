"""A tiny OpenAI-compatible HTTP server for judge tests: the real openai SDK talks to it.

It answers POST /v1/chat/completions with whatever ``behaviour`` says: a good judgement, text
that is not JSON, a score out of range, or nothing until long after the client's timeout.
"""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class JudgeServer:
    def __init__(self) -> None:
        self.behaviour = "ok"
        self.score = 0.8
        self.requests: list[dict] = []
        self.slow_seconds = 3.0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep the test output clean
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                server.requests.append({"path": self.path, "body": body})
                if self.path.rstrip("/") != "/v1/chat/completions":
                    return self._send(404, {"error": {"message": "not found"}})
                if server.behaviour == "slow":
                    time.sleep(server.slow_seconds)
                content = {
                    "ok": json.dumps({"score": server.score, "feedback": "Correct and complete."}),
                    "slow": json.dumps({"score": server.score, "feedback": "Too late."}),
                    "invalid_json": "Sure! I'd give it a 9/10 {score: nine",
                    "out_of_range": json.dumps({"score": 7, "feedback": "Seven out of ten."}),
                }[server.behaviour]
                self._send(200, completion(body.get("model", "judge"), content))

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout): nothing to answer

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> "JudgeServer":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def completion(model: str, content: str) -> dict:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 42, "completion_tokens": 9, "total_tokens": 51},
    }
