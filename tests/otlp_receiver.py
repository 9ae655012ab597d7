"""A small OTLP/HTTP trace receiver: real HTTP on 127.0.0.1, real protocol.

It takes ``POST /v1/traces`` with a protobuf body (gzip or deflate encoded too), decodes it with
opentelemetry-proto's ``ExportTraceServiceRequest`` and keeps each request and its spans.
``answer`` sets the HTTP status it replies with (200 unless a test wants it to refuse).
"""

import gzip
import threading
import time
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}
STATUS = {0: "UNSET", 1: "OK", 2: "ERROR"}


def value_of(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [value_of(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: value_of(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, which) if which else None


def attributes_of(pairs) -> dict[str, Any]:
    return {kv.key: value_of(kv.value) for kv in pairs}


@dataclass
class Span:
    """One received span, decoded into plain Python values."""

    trace_id: str
    span_id: str
    parent_id: str
    name: str
    kind: str
    start: int
    end: int
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any], int]]
    status: str
    status_message: str
    resource: dict[str, Any]
    scope: str
    links: list[tuple[str, str]] = field(default_factory=list)  # (trace id, span id) of each link


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    spans: list[Span] = field(default_factory=list)


class OTLPReceiver:
    def __init__(self) -> None:
        self.requests: list[Received] = []
        self.answer = 200
        self.script: list[int] = []  # the first answers, one per request; then ``answer``
        self._changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                encoding = self.headers.get("Content-Encoding", "")
                raw = gzip.decompress(body) if encoding == "gzip" else zlib.decompress(body) if encoding else body
                if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
                    self.send_error(404 if self.path != "/v1/traces" else 415)
                    return
                request = ExportTraceServiceRequest.FromString(raw)
                receiver._keep(Received(dict(self.headers), raw, _spans(request)))
                status = receiver.script.pop(0) if receiver.script else receiver.answer
                if status != 200:
                    self.send_error(status)
                    return
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _keep(self, received: Received) -> None:
        with self._changed:
            self.requests.append(received)
            self._changed.notify_all()

    @property
    def spans(self) -> list[Span]:
        return [span for request in self.requests for span in request.spans]

    def wait_for(self, predicate, timeout: float = 30) -> list[Span]:
        """The spans received once ``predicate(spans)`` holds (an AssertionError after ``timeout``)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(self.spans):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"the receiver got {len(self.spans)} span(s), not what was awaited")
                self._changed.wait(left)
            return self.spans

    def start(self) -> "OTLPReceiver":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _spans(request: ExportTraceServiceRequest) -> list[Span]:
    spans = []
    for resource_spans in request.resource_spans:
        resource = attributes_of(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for s in scope_spans.spans:
                spans.append(
                    Span(
                        trace_id=s.trace_id.hex(),
                        span_id=s.span_id.hex(),
                        parent_id=s.parent_span_id.hex(),
                        name=s.name,
                        kind=KINDS[s.kind],
                        start=s.start_time_unix_nano,
                        end=s.end_time_unix_nano,
                        attributes=attributes_of(s.attributes),
                        events=[(e.name, attributes_of(e.attributes), e.time_unix_nano) for e in s.events],
                        status=STATUS[s.status.code],
                        status_message=s.status.message,
                        resource=resource,
                        scope=scope_spans.scope.name,
                        links=[(link.trace_id.hex(), link.span_id.hex()) for link in s.links],
                    )
                )
    return spans
