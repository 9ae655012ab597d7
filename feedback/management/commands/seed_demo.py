from django.core.management.base import BaseCommand

from feedback.demo import seed_users, seed_workspace


class Command(BaseCommand):
    help = "Create the demo workspace and one demo user per role (staff, operator, reviewer)."

    def handle(self, *args, **options) -> None:
        workspace = seed_workspace()
        users = seed_users()
        self.stdout.write(f"Demo workspace '{workspace.name}' at {workspace.path}")
        self.stdout.write("Demo logins (username / password):")
        for username, password, groups in users:
            self.stdout.write(f"  {username:<9} / {password:<14} role: {', '.join(groups)}")
