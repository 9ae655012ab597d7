from django.core.management.base import BaseCommand

from feedback.strategies.demo import run_demo_loop


class Command(BaseCommand):
    help = "Run a demo workload on the offline model, mine, trial, promote, and print before/after figures."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--tasks", type=int, default=150, help="Tasks per phase (default 150).")
        parser.add_argument("--seed", type=int, default=7)
        parser.add_argument(
            "--auto-approve",
            action="store_true",
            help="Demo only: approve every proposal to trial, then promote or roll back by the trial's result.",
        )

    def handle(self, *args, **options) -> None:
        run_demo_loop(
            tasks_per_phase=options["tasks"], seed=options["seed"], auto_approve=options["auto_approve"],
            out=self.stdout.write,
        )  # fmt: skip
