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

- **history**: `bench.history` (COPY, seed 7, one year, ~10 steps a run and twenty runs of
  10,000 steps) plus the rollups and VACUUM ANALYZE.
- **loop**: runs of 10 steps through `execute_run` with a model and a tool that take no time
  (claim, lease, heartbeat thread, strategy selection, the conversation, the tool invoker with its
  JSON Schema check, shared breaker and thread pool, each step written by the ORM in one
  transaction with the run's counters under the lease, the run's end), each followed by the
  evaluation it queues (`evaluate_run`: the evaluators, score and outcome), as the worker runs
  it; the median of 30 runs, per model call. Timed apart: the run alone (issue 24's target: at
  most LangGraph's `create_react_agent` with `PostgresSaver` checkpointing every super-step, on
  the same workload in the same run) and its evaluation, per run; and both together against the
  100 ms a fast model takes to answer (target: under 2%). For reference, a bare committed INSERT
  of a step row, and LangGraph with `durability="exit"`.
- **worker**: one `celery worker --pool threads` process on the Redis broker. Runs per second
  include each run's evaluation task (queued when the run ends, taken by the same worker).
  Concurrency reached = (runs x model time per run) / wall time; the worker's
  `--concurrency` is the ideal.
- **dashboard**: gunicorn (2 workers x 4 threads, DEBUG off, hashed static files), logged in as
  an operator; the load generator shares the 2 cores with gunicorn and PostgreSQL. Issue 24's
  targets: each family of pages asked by **one client** (`wrk -c 1`, 10 s after 1 s of
  warm-up), **every request a different URL**: different runs (10-step runs, and the 10,000-step
  ones), run list filters, sorts and pages deep in the list (keyset cursors of runs spread over
  the year), searches (a word of one task, and words of every task), every metrics window, kind
  and period, and a live page's poll (the htmx request of a run's summary part). Each p95 is
  compared with `/healthz`'s p95 asked the same way, in the same run: at most 25x, a live page's
  cheap request at most 5x. The 304 revalidation row measures `If-None-Match` when a page sends
  an ETag; since plain polling (issue 24) none does, so the poll carries the 5x target. There is
  no page cache: every answer is rendered. Then **the page mix at a held rate** of 30 requests/s
  for 60 s (`bench/arrivals.py`, an open loop: each request is due at its time whether or not
  the ones before it were answered, and its latency runs from that due time), against the same
  mix asked by one client with the same Python client: p95 at most 2x, no errors. The mix, a
  team with live pages open: 40% polls, 20% 10-step traces, 15% run lists, 10% searches, 10%
  metrics pages, 5% 10,000-step traces.
- **mining**: `feedback.strategies.mining.mine(window_days=...)` (every pattern kind, in SQL),
  over an explicit full year (`window_days=365`: the whole history) and over a window of about
  100,000 runs; baseline: one pass over the window's error steps.

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
        "history", f"bench.history: {runs:,} runs, {steps:,} steps (COPY + rollups)", seconds, "s",
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


def failed(benchmark: str, measure: str, exc: BaseException) -> Result:
    """The row of a benchmark, or of one of its measures, that broke: FAILED, with its error."""
    traceback.print_exception(exc)
    return Result(benchmark, measure, None, "", note=f"FAILED: {type(exc).__name__}: {exc}"[:200])


def guard(name: str, bench: Callable[[], list[Result]]) -> list[Result]:
    """A benchmark that breaks is reported as broken, and the others still run. A benchmark of
    several measures guards each one itself (bench/dashboard.py: per family of pages), so one
    that breaks leaves the others' figures in the table."""
    try:
        return bench()
    except Exception as exc:
        return [failed(name, "FAILED", exc)]


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
        ratio = "" if r.ratio is None else f"{r.ratio:.2f}x" if r.ratio >= 0.1 else f"{r.ratio:.3f}x"
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
