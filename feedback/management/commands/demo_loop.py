from django.core.management.base import BaseCommand
from django.urls import reverse
from django.utils import timezone

from feedback.strategies import demo_report
from feedback.strategies.demo import run_demo_loop


class Command(BaseCommand):
    help = (
        "Run a demo workload on the configured model, mine, trial, promote what its trial says to promote, and "
        "print what was live in each phase and the before/after figures."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--tasks", type=int, default=150, help="Tasks per phase (default 150).")
        parser.add_argument("--seed", type=int, default=7)
        parser.add_argument(
            "--auto-approve",
            action="store_true",
            help="Demo only: approve every proposal to trial, then promote or roll back as each trial's test "
            "says; a trial still undecided at the run cap is reported undecided and left on trial.",
        )
        parser.add_argument(
            "--trial-batch", type=int, help="Trial runs between looks (default: tasks / 3, at least 20)."
        )
        parser.add_argument("--trial-limit", type=int, help="Trial runs at most (default: 8 x tasks).")
        parser.add_argument(
            "--trial-strategies",
            type=int,
            help="With --auto-approve: approve N proposals only, a reviewer's pick (default: all).",
        )
        parser.add_argument("--quiet", action="store_true", help="No line per run, only the phases and figures.")

    def handle(self, *args, **options) -> None:
        started = timezone.now()
        report = run_demo_loop(
            tasks_per_phase=options["tasks"], seed=options["seed"], auto_approve=options["auto_approve"],
            out=self._say, progress=not options["quiet"], trial_batch=options["trial_batch"],
            trial_limit=options["trial_limit"], trial_strategies=options["trial_strategies"],
        )  # fmt: skip
        demo_report.keep(report, started=started)
        self._say(f"The report, formatted: {reverse('feedback-strategies-demo-report')} (the strategies page links it)")

    def _say(self, line: str) -> None:
        # Flushed line by line: the demo loop on a real model runs for an hour, in the background,
        # and its log is how one watches it.
        self.stdout.write(line)
        self.stdout.flush()
