"""Benchmark 3: what a person waits for a page, under concurrent clients, against the constant
/healthz page in the same run.

gunicorn serves the project with production-like settings (DEBUG off, hashed static files when
``collect_static``); ``wrk`` (Debian package) loads each family of pages with ``clients``
connections after one real login, every request a different URL (different runs, filters,
searches, pages deep in the list, metric windows), and reports p50/p95 through a Lua ``done``
hook. Without wrk, a small Python load generator with threads does the same job (the CI test
uses it when wrk is missing).
"""

import http.cookiejar
import itertools
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from django.core.cache import cache
from django.db.models import Max, Min

from bench import report
from bench.results import Result
from bench.worker import BASE_DIR, database_url
from feedback import selectors
from feedback.metrics.tools import percentile_cont
from feedback.models import Run, Task
from feedback.models.run import NO_SCORE

# wrk's Lua: each thread walks its share of a list of paths (one per line), so every request asks
# for a different URL.
WRK_SCRIPT = """
local paths = {}
for line in io.lines(os.getenv("BENCH_PATHS")) do
  paths[#paths + 1] = line
end
local threads, count = {}, 0
setup = function(thread)
  count = count + 1
  thread:set("offset", count - 1)
  thread:set("step", tonumber(os.getenv("BENCH_THREADS")))
  table.insert(threads, thread)
end
local i = nil
request = function()
  i = (i or offset) + step
  local n = (i % #paths) + 1
  return wrk.format("GET", paths[n])
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("BENCH p50=%d p95=%d requests=%d errors=%d\\n", latency:percentile(50),
    latency:percentile(95), summary.requests, e.status + e.connect + e.read + e.write + e.timeout))
end
"""
WRK_THREADS = 2


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


def _wrk(
    base: str, targets: list[str], cookie: str, clients: int, seconds: float
) -> tuple[float | None, float | None, int]:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(WRK_SCRIPT)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as paths:
        paths.write("".join(f"{path}\n" for path in targets))
    threads = min(WRK_THREADS, clients)  # wrk gives each thread one connection at least
    env = {**os.environ, "BENCH_PATHS": paths.name, "BENCH_THREADS": str(threads)}
    out = subprocess.run(
        ["wrk", "-t", str(threads), "-c", str(clients), "-d", f"{max(1, round(seconds))}s", "--timeout", "30s",
         "-s", script.name, "-H", f"Cookie: {cookie}", base],
        capture_output=True, text=True, check=True, env=env,
    ).stdout  # fmt: skip
    os.unlink(script.name)
    os.unlink(paths.name)
    found = re.search(r"BENCH p50=(\d+) p95=(\d+) requests=(\d+) errors=(\d+)", out)
    if found is None or int(found.group(4)):
        raise RuntimeError(f"wrk failed or saw errors on {targets[0]}...:\n{out}")
    if not int(found.group(3)):
        return None, None, 0  # not one request finished in time: no figure, never a "met"
    return int(found.group(1)) / 1000, int(found.group(2)) / 1000, int(found.group(3))


def _python_load(base: str, targets: list[str], cookie: str, clients: int, seconds: float) -> tuple[float, float, int]:
    """The fallback: ``clients`` threads, each one request after another for ``seconds``, every
    request the next target of the list."""
    latencies: list[float] = []
    errors: list[str] = []
    deadline = time.monotonic() + seconds
    turn = itertools.count()

    def client() -> None:
        while time.monotonic() < deadline:
            path = targets[next(turn) % len(targets)]
            headers = {"Cookie": cookie}
            started = time.perf_counter()
            try:
                with urllib.request.urlopen(urllib.request.Request(base + path, headers=headers), timeout=30) as r:
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
        raise RuntimeError(f"requests to {targets[0]}... failed: {errors[:3]}")
    return percentile_cont(latencies, 0.5), percentile_cont(latencies, 0.95), len(latencies)


def measure(
    base: str, targets: list[str], cookie: str, clients: int, seconds: float
) -> tuple[float | None, float | None, int]:
    """(p50 ms, p95 ms, requests) over ``targets`` under ``clients`` concurrent clients, each
    request the next target; no figures when no request finished."""
    load = _wrk if shutil.which("wrk") else _python_load
    if seconds >= 2:
        load(base, targets[::-1], cookie, clients, 1.0)  # warm-up: connections, plans (other URLs first)
    return load(base, targets, cookie, clients, seconds)


def _sample_runs(rng: random.Random, count: int, **filters) -> list[int]:
    """Up to ``count`` run ids matching ``filters``, spread over the whole history."""
    span = Run.objects.aggregate(low=Min("id"), high=Max("id"))
    if span["low"] is None:
        return []
    found: set[int] = set()
    for _ in range(20):
        guesses = {rng.randint(span["low"], span["high"]) for _ in range(count * 4)}
        found.update(Run.objects.filter(pk__in=guesses, **filters).values_list("pk", flat=True))
        if len(found) >= count:
            break
    return sorted(found)[:count]


def page_families(rng: random.Random, size: int) -> list[tuple[str, list[str]]]:
    """(name, paths): every page the dashboard serves, each family as ``size`` different URLs where
    it has that many (different runs, filters, searches, pages deep in the list, windows)."""
    short = [f"/runs/{pk}/" for pk in _sample_runs(rng, size, step_count__range=(8, 12))]
    longest = Run.objects.order_by("-step_count").values_list("step_count", flat=True).first() or 0
    long = [f"/runs/{pk}/" for pk in Run.objects.filter(step_count=longest).values_list("pk", flat=True)[:size]]
    lists = [f"/runs/?sort={sort}" for sort in ("newest", "oldest", "score")]
    lists += [
        f"/runs/?status={status}&kind={kind}&sort={sort}"
        for status in ("", "succeeded", "failed", "cancelled")
        for kind in ("", *Task.Kind.values)
        for sort in ("newest", "score")
    ]
    deep = Run.objects.filter(pk__in=_sample_runs(rng, size)).only("created_at", "score")
    lists += [f"/runs/?after={selectors.run_cursor(run)}" for run in deep]
    lists += [f"/runs/?sort=score&after={selectors.run_cursor(run, 'sort_score')}" for run in _with_sort_score(deep)]
    generated = max(1, Run.objects.count())
    # A word of one task (the generated texts number their tasks), and words of every task.
    searches = [f"/runs/?q={n}" for n in rng.sample(range(generated), min(size // 2, generated))]
    searches += [f"/runs/?q={word}" for word in ("inbox", "triage", "kind+arithmetic", "email_triage")]
    windows = [
        f"/metrics/?days={days}&kind={kind}&granularity={granularity}"
        for days in (7, 30, 90, 365)
        for kind in ("", *Task.Kind.values)
        for granularity in ("day", "week")
    ]
    for paths in (lists, searches, windows):
        rng.shuffle(paths)
    return [
        ("trace page, 10-step runs", short),
        (f"trace page, {longest:,}-step runs", long),
        ("run list: filters, sorts, pages deep", lists[:size]),
        ("run list: searches", searches),
        ("metrics page: every window, kind and period", windows),
    ]


def _with_sort_score(runs) -> list[Run]:
    for run in runs:
        run.sort_score = NO_SCORE if run.score is None else run.score
    return list(runs)


def run(
    *,
    folder: Path,
    clients: int = 20,
    seconds: float = 10,
    username: str,
    password: str,
    collect_static: bool = True,
    size: int = 2000,
) -> list[Result]:
    """Each family of pages under ``clients`` clients, every request a different URL (the server
    keeps no page cache: each one is rendered), against /healthz in the same run.
    Each family, and /healthz, also with one client alone: what an answer costs, not its queue."""
    tool = "wrk" if shutil.which("wrk") else "python load generator"
    families = page_families(random.Random(7), size)
    cache.clear()
    results = []
    with Gunicorn(folder, collect_static=collect_static) as server:
        cookie = login(server.base, username, password)
        p50, p95, n = measure(server.base, ["/healthz"], cookie, clients, seconds)
        results.append(Result("dashboard", "constant page /healthz, p50", p50, "ms", p50))
        results.append(
            Result("dashboard", "constant page /healthz, p95 (baseline)", p95, "ms", p95, note=f"{n} requests, {tool}")
        )
        # One client alone: what each answer costs when nothing waits in front of it.
        alone, _, n = measure(server.base, ["/healthz"], cookie, 1, seconds / 2)
        results.append(Result("dashboard", "constant page /healthz, one client, p50", alone, "ms", alone))

        def family(name: str, targets: list[str]) -> list[Result]:
            """The family under ``clients`` clients (p50, p95), then with one client alone."""
            q50, q95, n = measure(server.base, targets, cookie, clients, seconds)
            one, _, m = measure(server.base, targets[::-1], cookie, 1, seconds / 2)
            note = f"{n} requests over {len(targets):,} URLs, {tool}" if n else f"no request finished ({tool})"
            return [
                Result("dashboard", f"{name}, p50", q50, "ms", p50),
                Result("dashboard", f"{name}, p95", q95, "ms", p95, target=5.0, note=note),
                Result("dashboard", f"{name}, one client, p50", one, "ms", alone, note=f"{m} requests"),
            ]

        for name, paths in families:
            if not paths:
                results.append(Result("dashboard", name, None, "ms", note="no such page in this history"))
                continue
            # One family that breaks (a timeout, an error page) is reported as FAILED; the
            # others keep their figures.
            try:
                results += family(name, paths)
            except Exception as exc:
                results.append(report.failed("dashboard", f"{name}, p95", exc))
    return results
