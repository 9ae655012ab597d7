import logging

from django.core.management.base import BaseCommand

from feedback.datasets.workloads import seed_workloads
from feedback.demo import seed_users, seed_workspace
from feedback.demo_history import seed_history


class Command(BaseCommand):
    help = (
        "Create the demo workspace, one demo user per role (staff, operator, reviewer), the three workload "
        "datasets and, in a database without runs, a short real history of the offline model (runs, a "
        "proposal, a trial)."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--no-history", action="store_true", help="Do not seed the history of runs.")

    def handle(self, *args, no_history: bool = False, **options) -> None:
        workspace = seed_workspace()
        users = seed_users()
        self.stdout.write(f"Demo workspace '{workspace.name}' at {workspace.path}")
        for version in seed_workloads():
            self.stdout.write(f"Dataset '{version.dataset.name}': {version.items.count()} items")
        if not no_history:
            logging.disable(logging.INFO)  # one line per step of 60 runs would bury the logins
            try:
                history = seed_history(workspace)
            finally:
                logging.disable(logging.NOTSET)
            if history is not None:
                trial = f"; on trial: {history.on_trial}" if history.on_trial else ""
                self.stdout.write(f"Seeded a history: {history.runs} runs, {history.proposals} proposals{trial}")
        self.stdout.write("Demo logins (username / password):")
        for username, password, groups in users:
            self.stdout.write(f"  {username:<9} / {password:<14} role: {', '.join(groups)}")
