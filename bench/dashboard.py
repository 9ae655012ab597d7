"""Benchmark 3: dashboard latency under concurrent clients, against the constant /healthz page.

gunicorn serves the project with production-like settings (DEBUG off, hashed static files when
``collect_static``); ``wrk`` (Debian package) loads each page with ``clients`` connections after
one real login, and reports p50/p95 through a Lua ``done`` hook. Without wrk, a small Python load
generator with threads does the same job (the CI test uses it when wrk is missing).
"""

import http.cookiejar
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

from django.core.cache import cache

from bench.results import Result
from bench.worker import BASE_DIR, database_url
from feedback.models import Run
from feedback.tool_metrics import percentile_cont

WRK_REPORT = """
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("BENCH p50=%d p95=%d requests=%d errors=%d\\n", latency:percentile(50),
    latency:percentile(95), summary.requests, e.status + e.connect + e.read + e.write + e.timeout))
end
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Gunicorn:
    def __init__(self, folder: Path, *, workers: int = 2, threads: int = 4, collect_static: bool = True) -> None:
        self.folder, self.workers, self.threads, self.collect_static = folder, workers, threads, collect_static
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "Gunicorn":
        env = {**os.environ, "DATABASE_URL": database_url(), "DEBUG": "false", "LOG_LEVEL": "WARNING"}
        if self.collect_static:
            env.update(STATIC_MANIFEST="true", STATIC_ROOT=str(self.folder / "static"))
            subprocess.run(
                [sys.executable, "manage.py", "collectstatic", "--noinput", "-v", "0"],
                cwd=BASE_DIR,
                env=env,
                check=True,
            )
        else:
            env["STATIC_MANIFEST"] = "false"
        self.log = (self.folder / "gunicorn.log").open("wb")
        self.process = subprocess.Popen(
            [
                sys.executable, "-m", "gunicorn", "agentsite.wsgi", "--bind", f"127.0.0.1:{self.port}",
                "--workers", str(self.workers), "--threads", str(self.threads), "--worker-class", "gthread",
                "--graceful-timeout", "5", "--timeout", "120",
            ],
            cwd=BASE_DIR, env=env, stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(self.base + "/healthz", timeout=2).read()
                return self
            except OSError:
                if self.process.poll() is not None:
                    break
                time.sleep(0.2)
        raise RuntimeError("gunicorn did not start: " + (self.folder / "gunicorn.log").read_text()[-3000:])

    def __exit__(self, *exc: object) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


def login(base: str, username: str, password: str) -> str:
    """Log in through the real form once; returns the Cookie header the load generator sends."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    page = opener.open(base + "/accounts/login/").read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    data = urllib.parse.urlencode({"username": username, "password": password, "csrfmiddlewaretoken": token})
    opener.open(urllib.request.Request(base + "/accounts/login/", data=data.encode(), headers={"Referer": base}))
    cookies = {c.name: c.value for c in jar}
    if "sessionid" not in cookies:
        raise RuntimeError(f"could not log in as {username}")
    return "; ".join(f"{k}={v}" for k, v in cookies.items())


def _wrk(url: str, cookie: str, clients: int, seconds: float) -> tuple[float | None, float | None, int]:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(WRK_REPORT)
    out = subprocess.run(
        ["wrk", "-t", "2", "-c", str(clients), "-d", f"{max(1, round(seconds))}s", "--timeout", "30s",
         "-s", script.name, "-H", f"Cookie: {cookie}", url],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    os.unlink(script.name)
    found = re.search(r"BENCH p50=(\d+) p95=(\d+) requests=(\d+) errors=(\d+)", out)
    if found is None or int(found.group(4)):
        raise RuntimeError(f"wrk failed or saw errors on {url}:\n{out}")
    if not int(found.group(3)):
        return None, None, 0  # not one request finished in time: no figure, never a "met"
    return int(found.group(1)) / 1000, int(found.group(2)) / 1000, int(found.group(3))


def _python_load(url: str, cookie: str, clients: int, seconds: float) -> tuple[float, float, int]:
    """The fallback: ``clients`` threads, each one request after another, for ``seconds``."""
    latencies: list[float] = []
    errors: list[str] = []
    deadline = time.monotonic() + seconds

    def client() -> None:
        while time.monotonic() < deadline:
            started = time.perf_counter()
            try:
                with urllib.request.urlopen(urllib.request.Request(url, headers={"Cookie": cookie}), timeout=30) as r:
                    r.read()
            except OSError as exc:
                errors.append(str(exc))
                return
            latencies.append((time.perf_counter() - started) * 1000)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors or not latencies:
        raise RuntimeError(f"requests to {url} failed: {errors[:3]}")
    return percentile_cont(latencies, 0.5), percentile_cont(latencies, 0.95), len(latencies)


def _one_request(url: str, cookie: str) -> float:
    started = time.perf_counter()
    with urllib.request.urlopen(urllib.request.Request(url, headers={"Cookie": cookie}), timeout=120) as response:
        response.read()
    return (time.perf_counter() - started) * 1000


def measure(url: str, cookie: str, clients: int, seconds: float) -> tuple[float | None, float | None, int]:
    """(p50 ms, p95 ms, requests) of ``url`` under ``clients`` concurrent clients; no figures
    when no request finished."""
    load = _wrk if shutil.which("wrk") else _python_load
    if seconds >= 2:
        load(url, cookie, clients, 1.0)  # warm-up: connections, caches, plans
    return load(url, cookie, clients, seconds)


def run(
    *, folder: Path, clients: int = 20, seconds: float = 10, username: str, password: str, collect_static: bool = True
) -> list[Result]:
    trace = Run.objects.order_by("-step_count", "-id").values_list("pk", "step_count").first()
    pages = [
        ("run list, unfiltered", "/runs/"),
        ("run list, failed email triage", "/runs/?status=failed&kind=email_triage"),
        (f"trace page, {trace[1] if trace else 0}-step run", f"/runs/{trace[0] if trace else 0}/"),
        ("metrics page, 365 days", "/metrics/?days=365&granularity=day"),
        ("metrics page, 365 days by week", "/metrics/?days=365&granularity=week"),
    ]
    tool = "wrk" if shutil.which("wrk") else "python load generator"
    # Every page starts cold (no page, user, session or tool-stats entry left by an earlier run):
    # the "first render" rows measure a real miss.
    cache.clear()
    results = []
    with Gunicorn(folder, collect_static=collect_static) as server:
        cookie = login(server.base, username, password)
        p50, p95, n = measure(server.base + "/healthz", cookie, clients, seconds)
        results.append(Result("dashboard", "constant page /healthz, p50", p50, "ms", p50))
        results.append(
            Result("dashboard", "constant page /healthz, p95 (baseline)", p95, "ms", p95, note=f"{n} requests, {tool}")
        )
        for name, path in pages:
            # The first request renders the page (the page cache has no entry yet): what one
            # client waits for when the data just changed, or the cache is off.
            miss = _one_request(server.base + path, cookie)
            results.append(Result("dashboard", f"{name}, first render (cache miss), 1 client", miss, "ms", p50))
            q50, q95, n = measure(server.base + path, cookie, clients, seconds)
            results.append(Result("dashboard", f"{name}, p50", q50, "ms", p50))
            note = f"{n} requests, {tool}" if n else f"no request finished within {seconds:g} s ({tool})"
            results.append(Result("dashboard", f"{name}, p95", q95, "ms", p95, target=5.0, note=note))
    return results
