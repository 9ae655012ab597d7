"""Rebuild the daily tables behind the metrics (DailyRunStats, DailyToolStats, DailyToolLatency)
from the rows: every closed day, or the last --days of them (feedback/metrics/daily.py)."""

from django.core.management.base import BaseCommand, CommandParser

from feedback.metrics.daily import daily_stats_rebuild_all


class Command(BaseCommand):
    help = "Rebuild the metrics' daily tables from the rows (every closed day, or the last --days days)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--days", type=int, default=None, help="only the last N closed days")

    def handle(self, *args, days: int | None = None, **options) -> None:
        if days is not None and days < 0:
            self.stderr.write("--days is a number of days, 0 or more.")
            raise SystemExit(2)
        written = daily_stats_rebuild_all(days=days)
        self.stdout.write(f"Rebuilt the closed days: {written} rows written.")
