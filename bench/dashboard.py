"""Benchmark 3: what a person waits for a page, against the constant /healthz page in the same
run (issue 24's targets).

gunicorn serves the project with production-like settings (DEBUG off, hashed static files when
``collect_static``); ``wrk`` (Debian package) asks each family of pages with one connection
after one real login, every request a different URL (different runs, filters, searches, pages
deep in the list, metric windows, live parts' polls), and reports p50/p95 through a Lua ``done``
hook; without wrk, the Python client of bench/arrivals.py does the same job. Then the page mix at
a held arrival rate (bench/arrivals.py: an open loop), against the same mix by one client.
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
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from django.core.cache import cache
from django.db.models import Max, Min

from bench import arrivals, report
from bench.results import Result
from bench.worker import BASE_DIR, database_url
from feedback import selectors
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
    base: str, targets: list[str], cookie: str, clients: int, seconds: float, headers: dict[str, str]
) -> tuple[float | None, float | None, int]:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(WRK_SCRIPT)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as paths:
        paths.write("".join(f"{path}\n" for path in targets))
    threads = min(WRK_THREADS, clients)  # wrk gives each thread one connection at least
    env = {**os.environ, "BENCH_PATHS": paths.name, "BENCH_THREADS": str(threads)}
    extra = [arg for name, value in headers.items() for arg in ("-H", f"{name}: {value}")]
    out = subprocess.run(
        ["wrk", "-t", str(threads), "-c", str(clients), "-d", f"{max(1, round(seconds))}s", "--timeout", "30s",
         "-s", script.name, "-H", f"Cookie: {cookie}", *extra, base],
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


def _python_load(
    base: str, targets: list[str], cookie: str, clients: int, seconds: float, headers: dict[str, str]
) -> tuple[float, float, int]:
    """The fallback: ``clients`` threads, each one request after another on its keep-alive
    connection for ``seconds``, every request the next target of the list."""
    outcome = arrivals.one_client(base, [(path, headers) for path in targets], cookie, seconds=seconds, clients=clients)
    if outcome.errors or not outcome.latencies:
        raise RuntimeError(f"requests to {targets[0]}... failed: {outcome.errors[:3]}")
    return outcome.percentile(0.5), outcome.percentile(0.95), len(outcome.latencies)


def measure(
    base: str, targets: list[str], cookie: str, clients: int, seconds: float, headers: dict[str, str] | None = None
) -> tuple[float | None, float | None, int]:
    """(p50 ms, p95 ms, requests) over ``targets`` under ``clients`` concurrent clients, each
    request the next target; no figures when no request finished."""
    load = _wrk if shutil.which("wrk") else _python_load
    if seconds >= 2:
        load(base, targets[::-1], cookie, clients, 1.0, headers or {})  # warm-up: connections, plans
    return load(base, targets, cookie, clients, seconds, headers or {})


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


@dataclass
class Family:
    name: str
    paths: list[str]
    weight: int  # its share of the page mix at a held rate, in %
    short: str = ""  # its name in the mix's note
    headers: dict[str, str] = field(default_factory=dict)


# A live page's poll: the htmx request of a run's summary part (286 once the run has settled).
POLL_FAMILY = "live part's poll (htmx, a run's summary)"
HTMX = {"HX-Request": "true"}


def page_families(rng: random.Random, size: int) -> list[Family]:
    """Every page the dashboard serves, each family as ``size`` different URLs where it has that
    many (different runs, filters, searches, pages deep in the list, windows), with its weight in
    the page mix of a team with live pages open: mostly the open pages' polls and trace pages."""
    short = [f"/runs/{pk}/" for pk in _sample_runs(rng, size, step_count__range=(8, 12))]
    polls = [f"/runs/{pk}/summary/" for pk in _sample_runs(rng, size)]
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
        Family("trace page, 10-step runs", short, 20, "10-step traces"),
        Family(f"trace page, {longest:,}-step runs", long, 5, f"{longest:,}-step traces"),
        Family("run list: filters, sorts, pages deep", lists[:size], 15, "run lists"),
        Family("run list: searches", searches, 10, "searches"),
        Family("metrics page: every window, kind and period", windows, 10, "metrics pages"),
        Family(POLL_FAMILY, polls, 40, "polls", HTMX),
    ]


def page_mix(families: list[Family], rng: random.Random, count: int = 4000) -> list[arrivals.Request]:
    """``count`` requests drawn by the families' weights, each family's URLs in turn (a URL comes
    again only once its family's list has gone round)."""
    live = [f for f in families if f.paths]
    turns = {f.name: itertools.cycle(f.paths) for f in live}
    drawn = rng.choices(live, weights=[f.weight for f in live], k=count)
    return [(next(turns[f.name]), f.headers) for f in drawn]


def _with_sort_score(runs) -> list[Run]:
    for run in runs:
        run.sort_score = NO_SCORE if run.score is None else run.score
    return list(runs)


def _etag(base: str, path: str, cookie: str) -> str | None:
    request = urllib.request.Request(base + path, headers={"Cookie": cookie})
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.headers.get("ETag")


def run(
    *,
    folder: Path,
    seconds: float = 10,
    username: str,
    password: str,
    collect_static: bool = True,
    size: int = 2000,
    rate: float = 30.0,
    rate_seconds: float = 60.0,
) -> list[Result]:
    """Issue 24's targets: each family of pages asked by one client, every request a different URL
    (the server keeps no page cache: each one is rendered), p95 against /healthz's one-client p95
    in the same run (at most 25x; a live page's revalidation or poll at most 5x); then the page
    mix at a held ``rate`` of requests a second, p95 against the same mix asked by one client
    (at most 2x, no errors)."""
    tool = "wrk" if shutil.which("wrk") else "python load generator"
    families = page_families(random.Random(7), size)
    cache.clear()
    results = []
    with Gunicorn(folder, collect_static=collect_static) as server:
        cookie = login(server.base, username, password)
        p50, p95, n = measure(server.base, ["/healthz"], cookie, 1, seconds)
        results.append(Result("dashboard", "constant page /healthz, one client, p50", p50, "ms", p50))
        results.append(
            Result(
                "dashboard", "constant page /healthz, one client, p95 (baseline)", p95, "ms", p95,
                note=f"{n} requests, {tool}",
            )
        )  # fmt: skip

        def family(f: Family) -> list[Result]:
            q50, q95, n = measure(server.base, f.paths, cookie, 1, seconds, f.headers)
            note = f"{n} requests over {len(f.paths):,} URLs, {tool}" if n else f"no request finished ({tool})"
            target = 5.0 if f.name == POLL_FAMILY else 25.0
            return [
                Result("dashboard", f"{f.name}, one client, p50", q50, "ms", p50),
                Result("dashboard", f"{f.name}, one client, p95", q95, "ms", p95, target=target, note=note),
            ]

        for f in families:
            if not f.paths:
                results.append(Result("dashboard", f.name, None, "ms", note="no such page in this history"))
                continue
            # One family that breaks (a timeout, an error page) is reported as FAILED; the
            # others keep their figures.
            try:
                results += family(f)
            except Exception as exc:
                results.append(report.failed("dashboard", f"{f.name}, one client, p95", exc))
        results += _revalidation(server.base, families, cookie, seconds, p95, tool)
        results += _held_rate(server.base, families, cookie, seconds, rate, rate_seconds)
    return results


def _revalidation(
    base: str, families: list[Family], cookie: str, seconds: float, baseline: float | None, tool: str
) -> list[Result]:
    """The trace page revalidated with If-None-Match (5x), when the page sends an ETag: since
    plain htmx polling (issue 24) it sends none, and the live part's poll is the cheap request."""
    name = "trace page revalidated (If-None-Match, 304), one client, p95"
    traces = next((f.paths for f in families if f.name.startswith("trace page, 10-")), [])
    try:
        tagged = [(path, tag) for path in traces[:200] if (tag := _etag(base, path, cookie))]
        if not tagged:
            note = f"no page sends an ETag (plain polling): the {POLL_FAMILY} row is a live page's request"
            return [Result("dashboard", name, None, "ms", note=note)]
        # wrk sends one set of headers: each URL of this family with its own tag needs the Python client.
        outcome = arrivals.one_client(base, [(p, {"If-None-Match": t}) for p, t in tagged], cookie, seconds=seconds)
        if outcome.errors:
            raise RuntimeError(f"revalidation failed: {outcome.errors[:3]}")
        note = f"{len(outcome.latencies)} requests over {len(tagged)} URLs, python client"
        return [Result("dashboard", name, outcome.percentile(0.95), "ms", baseline, target=5.0, note=note)]
    except Exception as exc:
        return [report.failed("dashboard", name, exc)]


def _held_rate(
    base: str, families: list[Family], cookie: str, seconds: float, rate: float, rate_seconds: float
) -> list[Result]:
    """The page mix by one client (the baseline), then at ``rate`` requests a second held for
    ``rate_seconds``; both with the same Python client, so the ratio compares like with like."""
    mix = page_mix(families, random.Random(11))
    weights = ", ".join(f"{f.weight}% {f.short or f.name}" for f in families if f.paths)
    name = f"page mix at {rate:g} requests/s (held rate, open loop), p95"
    try:
        arrivals.one_client(base, mix[::-1], cookie, seconds=min(seconds, 2))  # warm-up
        alone = arrivals.one_client(base, mix, cookie, seconds=seconds)
        if alone.errors:
            raise RuntimeError(f"the page mix failed: {alone.errors[:3]}")
        baseline = alone.percentile(0.95)
        held = arrivals.hold_rate(base, mix[len(alone.latencies) :], cookie, rate=rate, seconds=rate_seconds)
    except Exception as exc:
        return [report.failed("dashboard", name, exc)]
    errors = f", {len(held.errors)} errors: {held.errors[0]}" if held.errors else ", no errors"
    return [
        Result(
            "dashboard", "page mix, one client, p95 (baseline)", baseline, "ms", baseline,
            note=f"{len(alone.latencies)} requests ({weights}); python client",
        ),
        Result("dashboard", f"page mix at {rate:g} requests/s, p50", held.percentile(0.5), "ms", baseline),
        Result(
            "dashboard", name, held.percentile(0.95), "ms", baseline, target=2.0, errors=len(held.errors),
            note=f"{len(held.latencies)} requests in {held.seconds:.0f} s ({held.rate:.1f}/s), latency from each"
            f" request's due time{errors}"[:300],
        ),
    ]  # fmt: skip
