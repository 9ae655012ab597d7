from django.core.management.base import BaseCommand

from feedback.retention import retention_days, sandboxes_clean


class Command(BaseCommand):
    help = (
        "Remove the sandboxes in this machine's RUN_SANDBOXES_ROOT of runs that ended more than "
        "RUN_SANDBOX_RETENTION_DAYS ago (beat does it hourly; run this on each worker machine whose "
        "sandbox folder the others do not share)."
    )

    def handle(self, *args, **options) -> None:
        if not retention_days():
            self.stdout.write("RUN_SANDBOX_RETENTION_DAYS is 0: sandboxes are kept forever.")
            return
        removed = sandboxes_clean()
        self.stdout.write(f"Removed the sandboxes of {len(removed)} run(s).")
