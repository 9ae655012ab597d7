"""Recount the daily rollups behind the metrics (DailyRunStats, DailyToolStats and
DailyToolLatency), month by month, after counting the ended runs that were not."""

from datetime import date, timedelta

from django.core.management.base import BaseCommand, CommandParser
from django.db.models import Max, Min
from django.utils import timezone

from feedback.models import Run
from feedback.rollups import daily_stats_refresh

CHUNK_DAYS = 31


class Command(BaseCommand):
    help = "Recount the daily metric rollups (all of them, or the last --days days)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--days", type=int, default=None, help="only the last N days")

    def handle(self, *args, days: int | None = None, **options) -> None:
        until = timezone.localdate() + timedelta(days=1)
        if days is not None:
            since = until - timedelta(days=days + 1)
        else:
            span = Run.objects.aggregate(first=Min("created_at"), last=Max("created_at"))
            if span["first"] is None:
                self.stdout.write("No runs: nothing to count.")
                return
            since = timezone.localtime(span["first"]).date()
            until = max(until, timezone.localtime(span["last"]).date() + timedelta(days=1))
        written, start = 0, since
        # One transaction per month: short locks, and progress a person can follow.
        while start < until:
            end: date = min(until, start + timedelta(days=CHUNK_DAYS))
            written += daily_stats_refresh(since_day=start, until_day=end)
            start = end
        self.stdout.write(f"Recounted {since} to {until - timedelta(days=1)}: {written} rows.")
