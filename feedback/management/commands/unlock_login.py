"""List login lockouts, and lift them (feedback/throttle.py)."""

from django.core.management.base import BaseCommand, CommandError, CommandParser

from feedback import throttle
from feedback.models import LoginFailures


class Command(BaseCommand):
    help = "Lift the login lockout of accounts (--user) or IP addresses (--ip), or all (--all); --list shows them."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--user", action="append", default=[], help="an account name (repeatable)")
        parser.add_argument("--ip", action="append", default=[], help="a client IP address (repeatable)")
        parser.add_argument("--all", dest="everything", action="store_true", help="every failure counted")
        parser.add_argument("--list", dest="show", action="store_true", help="show the failures and what is locked")

    def handle(self, *args, user: list[str], ip: list[str], everything: bool, show: bool, **options) -> None:
        if show:
            for row in LoginFailures.objects.all():
                until = throttle.locked_until(row)
                state = f"locked until {until.isoformat(timespec='seconds')}" if until else "not locked"
                self.stdout.write(f"{row.scope} {row.key}: {row.failures} failures, {state}")
            return
        if not (user or ip or everything):
            raise CommandError("Name what to unlock: --user NAME, --ip ADDRESS or --all.")
        if everything:
            removed = LoginFailures.objects.all().delete()[0]
        else:
            removed = sum(throttle.login_failures_clear(username=name) for name in user)
            removed += sum(throttle.login_failures_clear(address=address) for address in ip)
        self.stdout.write(f"Unlocked: {removed} record(s) of failed logins removed.")
