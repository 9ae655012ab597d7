"""The dashboard benchmark reports per family of pages: one family that breaks (a timeout, an
error page) says FAILED with its error, and the other families keep their figures."""

import contextlib

from bench import dashboard, report


def test_a_family_that_breaks_is_failed_alone(monkeypatch, tmp_path):
    families = [("trace page, 10-step runs", ["/runs/1/"]), ("metrics page: every window", ["/metrics/?days=365"])]
    monkeypatch.setattr(dashboard, "page_families", lambda rng, size: families)

    @contextlib.contextmanager
    def server(folder, **options):
        yield type("Server", (), {"base": "http://bench"})

    def measure(base, targets, cookie, clients, seconds):
        if targets[0].startswith("/metrics/"):
            raise RuntimeError("wrk failed or saw errors on /metrics/?days=365...: 3 timeouts")
        return 10.0, 20.0, 100

    monkeypatch.setattr(dashboard, "Gunicorn", server)
    monkeypatch.setattr(dashboard, "login", lambda base, username, password: "sessionid=x")
    monkeypatch.setattr(dashboard, "measure", measure)
    monkeypatch.setattr(dashboard.cache, "clear", lambda: None)
    rows = dashboard.run(folder=tmp_path, username="u", password="p", collect_static=False)
    table = {row.measure: row for row in rows}
    assert table["trace page, 10-step runs, p95"].value == 20.0
    assert table["trace page, 10-step runs, p95"].verdict == "met (≤ 5)"
    failed = table["metrics page: every window, p95"]
    assert failed.value is None and failed.note.startswith("FAILED: RuntimeError: wrk failed")
    assert "metrics page: every window, p50" not in table
    assert "| dashboard | metrics page: every window, p95 | not available |" in report.markdown(rows)


def test_a_benchmark_that_breaks_as_a_whole_is_one_failed_row():
    def broken():
        raise TimeoutError("no answer")

    [row] = report.guard("mining", broken)
    assert (row.benchmark, row.measure, row.note) == ("mining", "FAILED", "FAILED: TimeoutError: no answer")
