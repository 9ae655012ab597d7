"""Fill the database with a realistic history for the benchmarks (PostgreSQL only)."""

import time

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection

from feedback.metrics.daily import daily_stats_rebuild_all


class Command(BaseCommand):
    help = "Generate N runs (with steps, evaluations, errors, strategies and trials) over a year, with COPY."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--runs", type=int, default=1000)
        parser.add_argument("--steps", type=int, default=10, help="average steps per run")
        parser.add_argument("--days", type=int, default=365)
        parser.add_argument("--seed", type=int, default=7)
        parser.add_argument("--long-runs", type=int, default=1, help="runs with --long-run-steps steps (traces)")
        parser.add_argument("--long-run-steps", type=int, default=1000)
        parser.add_argument("--strategies", type=int, default=60)

    def handle(self, *args, **opts) -> None:
        if connection.vendor != "postgresql":
            raise CommandError("generate_history writes with PostgreSQL COPY: set DATABASE_URL to PostgreSQL.")
        from bench.history import generate

        started = time.monotonic()
        counts = generate(
            runs=opts["runs"],
            steps=opts["steps"],
            days=opts["days"],
            seed=opts["seed"],
            long_runs=min(opts["long_runs"], opts["runs"]),
            long_run_steps=opts["long_run_steps"],
            strategies=opts["strategies"],
            progress=self.stdout.write,
        )
        copied = time.monotonic() - started
        daily_stats_rebuild_all()  # the closed days of the history, as beat would rebuild them
        self.stdout.write(
            ", ".join(f"{n:,} {name}" for name, n in counts.items())
            + f" in {copied:.0f} s; daily tables in {time.monotonic() - started - copied:.0f} s."
        )
