"""The benchmark table: printed, and kept in BENCHMARKS.md with the machine it ran on."""

import os
import platform
import re
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from bench.results import Result

HEADER = """# Benchmarks

Produced by `make bench` (`python -m bench`, code in `bench/`); never edit the tables by hand.
Each figure is compared with a baseline measured in the same run, on the same machine and
database. A scale's section is replaced when `make bench BENCH_RUNS=N` runs again at that scale.

What the figures include:

- **history**: `generate_history` (COPY, seed 7, one year) plus the rollups and VACUUM ANALYZE.
- **loop**: after a warm-up run, 3 rounds of one engine run then one batch of 500 bare INSERTs,
  taking turns; the best round of each. In one process: claim, lease, heartbeat thread (which
  writes the run's counters at most once a second), strategy selection (the live strategies kept
  while their shared version key is unchanged), tool invoker (JSON Schema, the call on a thread
  of the tool pool with its timeout; the breaker's state in Redis, read from the process's memory
  while Redis's `CLIENT TRACKING` reports it unchanged), each step committed under the lease (on
  PostgreSQL one call of the `feedback_write_step` function: the lease checked under the run's
  advisory lock, the step, and its attempt rows when an attempt failed), run end (which queues
  the evaluation). Baseline: one committed single-row INSERT of a step (raw SQL).
  The peer: LangGraph's `create_react_agent` with `PostgresSaver`, same model stand-in and tool.
- **worker**: one `celery worker --pool threads` process on the Redis broker. Runs per second
  include each run's evaluation task (queued when the run ends, taken by the same worker).
  Concurrency reached = (runs x model time per run) / wall time; the worker's
  `--concurrency` is the ideal.
- **dashboard**: gunicorn (2 workers x 4 threads, DEBUG off, hashed static files), `wrk` with
  20 connections for 10 s per page after 1 s of warm-up, logged in as an operator; the load
  generator shares the 2 cores with gunicorn and PostgreSQL. The trace page renders its first
  100 steps (later ones load as the operator scrolls); the metrics page reads daily rollups
  (per-tool stats included, since `DailyToolStats`) and counts only the partial day at a
  window's edge live; the run list pages by keyset, with no COUNT. Pages are served
  from the page cache (`feedback/pagecache.py`, the default `PAGE_CACHE_SECONDS=5`: an entry
  per user, browser and URL, rendered again every 5 s during the load while the other clients
  are served the entry, kept in each web process's memory while Redis reports it unchanged);
  sessions and the signed-in user come from the cache too. The trace
  benchmarked is the generated history's newest run, which is still *running*: its page is
  stored like the others, its elapsed time and waterfall span put into each answer (they move
  with the clock), its steps' HTML reused. The cache is emptied before the first page; the
  "first render" rows are one request with no entry, one client: what a page costs when its
  data just changed, or with the page cache off.
- **mining**: `feedback.strategies.mining.mine(window_days=...)` (every pattern kind, in SQL),
  over the last 36 days and over every run (`window_days=None`; before the window was explicit,
  the "all" rows silently mined the last 30 days); baseline: one pass over the window's error steps.

Noise: on the 2-core VM these tables come from, repeated runs of the same code differed by up
to 2x on the dashboard figures (the `/healthz` p95 baseline alone ranged from 10 to 42 ms over
five runs) and by ~30% on the loop figures; compare ratios, and across more than one run.
"""


def machine() -> str:
    from django.db import connection

    cpu = platform.processor() or "unknown"
    try:
        found = re.search(r"model name\s*:\s*(.+)", Path("/proc/cpuinfo").read_text())
        cpu = found.group(1).strip() if found else cpu
        kib = int(re.search(r"MemTotal:\s*(\d+)", Path("/proc/meminfo").read_text()).group(1))
        ram = f"{kib / 1024 / 1024:.0f} GiB"
    except OSError:
        ram = "unknown"
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        postgres = cursor.fetchone()[0]
    return (
        f"{cpu}, {os.cpu_count()} cores, {ram} RAM, PostgreSQL {postgres}, Python {platform.python_version()}, "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC"
    )


def generation_row(runs: int, seconds: float) -> Result:
    from feedback.models import Step

    steps = Step.objects.count()
    return Result(
        "history", f"generate_history: {runs:,} runs, {steps:,} steps (COPY + rollups)", seconds, "s",
        note="one year, seed 7",
    )  # fmt: skip


def previous_generation(path: Path, runs: int) -> Result | None:
    """The history row of this scale's last section, for a run that reused its database."""
    if not path.exists():
        return None
    text = path.read_text()
    start, end = f"<!-- bench:{runs} -->", f"<!-- /bench:{runs} -->"
    if start not in text or end not in text:
        return None
    section = text[text.index(start) : text.index(end)]
    found = re.search(r"^\| history \| (.+?) \| ([\d.,]+) s \|", section, re.M)
    if found is None:
        return None
    measure = found.group(1).removesuffix(" (database reused from an earlier run)")
    value = float(found.group(2).replace(",", ""))
    return Result("history", f"{measure} (database reused from an earlier run)", value, "s", note="one year, seed 7")


def guard(name: str, bench: Callable[[], list[Result]]) -> list[Result]:
    """A benchmark that breaks is reported as broken, and the others still run."""
    try:
        return bench()
    except Exception as exc:
        traceback.print_exc()
        return [Result(name, "FAILED", None, "", note=f"{type(exc).__name__}: {exc}"[:200])]


def _fmt(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"


def markdown(rows: list[Result]) -> str:
    lines = [
        "| benchmark | measure | value | baseline | ratio | target | note |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for r in rows:
        value = "not available" if r.value is None else f"{_fmt(r.value)} {r.unit}"
        baseline = "" if r.baseline is None or r.value is None else f"{_fmt(r.baseline)}"
        ratio = "" if r.ratio is None else f"{r.ratio:.2f}x"
        lines.append(f"| {r.benchmark} | {r.measure} | {value} | {baseline} | {ratio} | {r.verdict} | {r.note} |")
    return "\n".join(lines)


def write(path: Path, runs: int, table: str) -> None:
    start, end = f"<!-- bench:{runs} -->", f"<!-- /bench:{runs} -->"
    section = f"{start}\n## {runs:,} runs\n\nMachine: {machine()}\n\n{table}\n{end}"
    text = path.read_text() if path.exists() else HEADER
    if "<!-- bench:" in text:  # the header is code's to keep current, the sections are data
        text = HEADER + "\n" + text[text.index("<!-- bench:") :]
    if start in text and end in text:
        text = text[: text.index(start)] + section + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text)


def drop_queue(queue: str) -> None:
    import redis
    from django.conf import settings

    if settings.CELERY_BROKER_URL.startswith("redis"):
        redis.Redis.from_url(settings.CELERY_BROKER_URL).delete(queue)
