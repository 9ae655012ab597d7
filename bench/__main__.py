"""`make bench`: generate the history, run every benchmark on PostgreSQL, print the table and
write it into BENCHMARKS.md (one section per scale, the other scales' sections kept).

    DATABASE_URL=postgres://root@127.0.0.1:5432/bench python -m bench --runs 100000
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--runs", type=int, default=100_000, help="runs in the generated history")
    parser.add_argument("--reuse", action="store_true", help="keep the bench database if it has --runs runs")
    parser.add_argument("--seconds", type=float, default=10, help="one client per family of pages")
    parser.add_argument("--rate", type=float, default=30, help="requests a second of the page mix (held)")
    parser.add_argument("--rate-seconds", type=float, default=60, help="how long the rate is held")
    parser.add_argument("--only", default="loop,worker,dashboard,mining")
    parser.add_argument("--out", default=str(BASE_DIR / "BENCHMARKS.md"))
    return parser.parse_args()


def _recreate_database() -> None:
    import psycopg
    from django.conf import settings

    db = settings.DATABASES["default"]
    if db["NAME"] in {"test", "postgres"} or not db["ENGINE"].endswith("postgresql"):
        sys.exit(f"Refusing to recreate {db['NAME']!r}: point DATABASE_URL at a PostgreSQL database of its own.")
    with psycopg.connect(
        host=db["HOST"] or "127.0.0.1", port=db["PORT"] or 5432, user=db["USER"], password=db["PASSWORD"] or None,
        dbname="postgres", autocommit=True,
    ) as conn:  # fmt: skip
        conn.execute(f'DROP DATABASE IF EXISTS "{db["NAME"]}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{db["NAME"]}"')


def main() -> None:
    args = _parse()
    work = Path(tempfile.mkdtemp(prefix="bench-"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ["RUN_SANDBOXES_ROOT"] = str(work / "runs")
    # Tasks the engine queues (evaluations) go to a queue of this run, dropped at the end.
    os.environ["CELERY_TASK_DEFAULT_QUEUE"] = queue = f"bench-main-{os.getpid()}"
    sys.path.insert(0, str(BASE_DIR))
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from bench import report
    from bench.history import BENCH_PASSWORD, GENERATED_TASK_PREFIX, fill
    from feedback.models import Run

    rows = []
    existing = 0
    if args.reuse:
        try:
            # Generated runs only: the benchmarks themselves add a few hundred.
            existing = Run.objects.filter(task__text__startswith=GENERATED_TASK_PREFIX).count()
        except Exception:
            connection.close()
    if existing != args.runs:
        connection.close()
        _recreate_database()
        call_command("migrate", verbosity=0)
        started = time.perf_counter()
        # Twenty runs of 10,000 steps for the long trace pages, beside the ~10-step ones.
        print(fill(runs=args.runs, long_runs=20, long_run_steps=10_000))
        rows.append(report.generation_row(args.runs, time.perf_counter() - started))
    elif (earlier := report.previous_generation(Path(args.out), args.runs)) is not None:
        rows.append(earlier)
    only = set(args.only.split(","))
    if "loop" in only:
        from bench import loop

        rows += report.guard("loop", lambda: loop.run(database_url=os.environ["DATABASE_URL"]))
    if "worker" in only:
        from bench import worker

        rows += report.guard("worker", lambda: worker.run(folder=work))
    if "dashboard" in only:
        from bench import dashboard

        rows += report.guard(
            "dashboard",
            lambda: dashboard.run(
                folder=work,
                seconds=args.seconds,
                username="bench-operator",
                password=BENCH_PASSWORD,
                rate=args.rate,
                rate_seconds=args.rate_seconds,
            ),
        )
    if "mining" in only:
        from bench import mining

        rows += report.guard("mining", mining.run)
    report.drop_queue(queue)
    table = report.markdown(rows)
    print(table)
    report.write(Path(args.out), args.runs, table)
    print(f"Written to {args.out}.")


if __name__ == "__main__":
    main()
