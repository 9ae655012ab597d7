"""Requests at a held arrival rate (an open loop), and the keep-alive HTTP client it shares with
the one-client measures.

Why not a library: locust is heavy (gevent monkey-patching, a web UI, its own process model) and
its ``constant_throughput`` paces each simulated user, who still waits for an answer before the
next request, so a slow answer delays the requests behind it (closed loop per user); wrk2 is not
packaged in Debian. This is the wrk2 scheme in a few lines: request ``i`` is due at
``start + i / rate``; a dispatcher hands it to a pool of threads at its due time, and its latency
runs from that due time, not from when a thread got to send it, so an answer that keeps the
others waiting counts their wait (no coordinated omission).
"""

import http.client
import queue
import threading
import time
import urllib.parse
from dataclasses import dataclass, field

from feedback.metrics.tools import percentile_cont

# A request: its path and the headers it adds to the session cookie.
Request = tuple[str, dict[str, str]]


class Client:
    """One keep-alive connection, re-opened (and the request sent once more) when the server
    closed it between two requests."""

    def __init__(self, base: str, cookie: str) -> None:
        parts = urllib.parse.urlsplit(base)
        self.host, self.port, self.cookie = parts.hostname, parts.port, cookie
        self.conn: http.client.HTTPConnection | None = None

    def get(self, path: str, headers: dict[str, str]) -> int:
        for attempt in (1, 2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
            try:
                self.conn.request("GET", path, headers={"Cookie": self.cookie, **headers})
                response = self.conn.getresponse()
                response.read()
                return response.status
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


@dataclass
class Outcome:
    latencies: list[float] = field(default_factory=list)  # ms, each from its due time
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0  # from the first due time to the last answer

    def percentile(self, fraction: float) -> float | None:
        return percentile_cont(self.latencies, fraction) if self.latencies else None

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds else 0.0


def hold_rate(
    base: str, requests: list[Request], cookie: str, *, rate: float, seconds: float, pool: int = 32
) -> Outcome:
    """``rate`` requests a second for ``seconds``, request ``i`` the ``i``-th of ``requests``
    (cycled); each one's latency from its due time. An answer of 400 or more is an error."""
    due_times: queue.Queue = queue.Queue()
    outcome = Outcome()
    lock = threading.Lock()
    finished = [0.0]

    def sender() -> None:
        client = Client(base, cookie)
        while (item := due_times.get()) is not None:
            i, due = item
            path, headers = requests[i % len(requests)]
            try:
                status = client.get(path, headers)
                error = f"{status} on {path}" if status >= 400 else None
            except OSError as exc:
                error = f"{type(exc).__name__} on {path}: {exc}"
            done = time.perf_counter()
            with lock:
                outcome.latencies.append((done - due) * 1000)
                finished[0] = max(finished[0], done)
                if error:
                    outcome.errors.append(error)
        client.close()

    threads = [threading.Thread(target=sender, daemon=True) for _ in range(pool)]
    for t in threads:
        t.start()
    start = time.perf_counter() + 0.05
    for i in range(max(1, round(rate * seconds))):
        due = start + i / rate
        if (wait := due - time.perf_counter()) > 0:
            time.sleep(wait)
        due_times.put((i, due))
    for _ in threads:
        due_times.put(None)
    for t in threads:
        t.join()
    outcome.seconds = finished[0] - start
    return outcome


def one_client(base: str, requests: list[Request], cookie: str, *, seconds: float, clients: int = 1) -> Outcome:
    """``clients`` threads, each one request after another for ``seconds`` (a closed loop), every
    request the next of ``requests``; each latency from its own send."""
    outcome = Outcome()
    lock = threading.Lock()
    turn = iter(range(10**9))
    started = time.perf_counter()
    deadline = started + seconds

    def client() -> None:
        http_client = Client(base, cookie)
        while time.perf_counter() < deadline:
            with lock:
                path, headers = requests[next(turn) % len(requests)]
            sent = time.perf_counter()
            try:
                status = http_client.get(path, headers)
                error = f"{status} on {path}" if status >= 400 else None
            except OSError as exc:
                error = f"{type(exc).__name__} on {path}: {exc}"
            with lock:
                outcome.latencies.append((time.perf_counter() - sent) * 1000)
                if error:
                    outcome.errors.append(error)
            if error:
                break
        http_client.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    outcome.seconds = time.perf_counter() - started
    return outcome
