"""The dashboard benchmark reports per family of pages: one family that breaks (a timeout, an
error page) says FAILED with its error, and the other families keep their figures. The held-rate
load generator measures each request from its due time, and counts error answers."""

import contextlib
import http.server
import threading
import time

from bench import arrivals, dashboard, report
from bench.results import Result


def test_a_family_that_breaks_is_failed_alone(monkeypatch, tmp_path):
    families = [
        dashboard.Family("trace page, 10-step runs", ["/runs/1/"], 50),
        dashboard.Family("metrics page: every window", ["/metrics/?days=365"], 50),
    ]
    monkeypatch.setattr(dashboard, "page_families", lambda rng, size: families)

    @contextlib.contextmanager
    def server(folder, **options):
        yield type("Server", (), {"base": "http://bench"})

    def measure(base, targets, cookie, clients, seconds, headers=None):
        assert clients == 1  # issue 24: one client per family
        if targets[0].startswith("/metrics/"):
            raise RuntimeError("wrk failed or saw errors on /metrics/?days=365...: 3 timeouts")
        return 10.0, 20.0, 100

    monkeypatch.setattr(dashboard, "Gunicorn", server)
    monkeypatch.setattr(dashboard, "login", lambda base, username, password: "sessionid=x")
    monkeypatch.setattr(dashboard, "measure", measure)
    monkeypatch.setattr(dashboard.cache, "clear", lambda: None)
    monkeypatch.setattr(dashboard, "_revalidation", lambda *args: [])
    monkeypatch.setattr(dashboard, "_held_rate", lambda *args: [])
    rows = dashboard.run(folder=tmp_path, username="u", password="p", collect_static=False)
    table = {row.measure: row for row in rows}
    assert table["trace page, 10-step runs, one client, p95"].value == 20.0
    assert table["trace page, 10-step runs, one client, p95"].verdict == "met (≤ 25)"  # 20 ms against 20 ms
    failed = table["metrics page: every window, one client, p95"]
    assert failed.value is None and failed.note.startswith("FAILED: RuntimeError: wrk failed")
    assert "metrics page: every window, one client, p50" not in table
    assert "| dashboard | metrics page: every window, one client, p95 | not available |" in report.markdown(rows)


def test_a_benchmark_that_breaks_as_a_whole_is_one_failed_row():
    def broken():
        raise TimeoutError("no answer")

    [row] = report.guard("mining", broken)
    assert (row.benchmark, row.measure, row.note) == ("mining", "FAILED", "FAILED: TimeoutError: no answer")


class _Slow(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        time.sleep(0.05)
        self.send_response(500 if self.path == "/broken" else 200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def _server():
    server = http.server.HTTPServer(("127.0.0.1", 0), _Slow)  # one request at a time
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_held_rate_counts_the_wait_behind_a_slow_answer():
    # 50 requests/s against a server that answers one at a time in 50 ms: the answers fall behind
    # the schedule. Measured from each request's send (a closed loop) every latency would be
    # ~50 ms; from its due time, the last requests waited for the ones in front of them.
    with _server() as base:
        held = arrivals.hold_rate(base, [("/", {})], "c=1", rate=50, seconds=0.4, pool=4)
        alone = arrivals.one_client(base, [("/", {})], "c=1", seconds=0.3)
        broken = arrivals.hold_rate(base, [("/", {}), ("/broken", {})], "c=1", rate=10, seconds=0.4)
    assert len(held.latencies) == 20 and not held.errors
    assert max(held.latencies) > 300 and held.percentile(0.95) > 5 * alone.percentile(0.95)
    assert held.rate < 40  # the server could not keep up with the rate asked
    assert 40 < alone.percentile(0.5) < 200
    assert broken.errors == ["500 on /broken", "500 on /broken"]
    row = Result("dashboard", "page mix", 10.0, "ms", 10.0, target=2.0, errors=len(broken.errors))
    assert row.verdict == "NOT met (2 errors)"
