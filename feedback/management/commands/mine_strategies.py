"""Mine the runs for recurring failures and propose strategies, now, over a window you choose."""

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from feedback.strategies.insights import insights_update
from feedback.strategies.proposals import mine_and_propose


class Command(BaseCommand):
    help = (
        "Mine the last --days days (default STRATEGY_MINING_WINDOW_DAYS) or --all-history, propose strategies "
        "and update the insight lists from failure/success pairs."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        window = parser.add_mutually_exclusive_group()
        window.add_argument("--days", type=int, default=None, help="the last N days (default: the setting)")
        window.add_argument("--all-history", action="store_true", help="every run ever recorded")
        parser.add_argument(
            "--no-insights", action="store_true", help="only the patterns: leave the insight lists as they are"
        )

    def handle(
        self, *args, days: int | None = None, all_history: bool = False, no_insights: bool = False, **options
    ) -> None:
        if days is not None and days < 1:
            raise CommandError("--days must be at least 1.")
        window_days = None if all_history else days or settings.STRATEGY_MINING_WINDOW_DAYS
        touched = mine_and_propose(window_days=window_days)
        where = "all history" if window_days is None else f"the last {window_days} day(s)"
        self.stdout.write(f"Mined {where}: {len(touched)} strateg(ies) proposed or reinforced.")
        for strategy in touched:
            line = f"  #{strategy.pk} [{strategy.pattern_kind}] {strategy.title} (support {strategy.support})"
            self.stdout.write(line)
        if no_insights:
            return
        updated = insights_update(window_days=window_days)
        self.stdout.write(f"Insight lists proposed or given a new version: {len(updated)}.")
        for strategy in updated:
            version = strategy.versions.order_by("-number").first()
            line = f"  #{strategy.pk} {strategy.title}: v{version.number}, {len(version.insights)} insight(s)"
            self.stdout.write(line)
