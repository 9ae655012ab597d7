from django.conf import settings
from django.db import models


class JobLock(models.Model):
    """A job people start from a page that must not run twice at once (the demo loop): a row while
    it is queued or running, deleted when it ends. In the database, so it holds across web and
    worker processes and their restarts; ``expires_at`` frees it if the worker died with the job.
    Taken and released by feedback/locks.py."""

    name = models.CharField(max_length=100, primary_key=True)
    # The holder's: only it releases or renews the lock (a late worker never frees a newer one).
    token = models.CharField(max_length=32)
    acquired_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    acquired_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)

    def __str__(self) -> str:
        return f"{self.name} (until {self.expires_at:%Y-%m-%d %H:%M:%S})"
