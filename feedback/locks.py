"""Locks on jobs people start from a page (``JobLock``): taken when the job is queued, released
by the job when it ends, or expired when its worker died with it."""

import uuid
from datetime import timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.utils import timezone

from feedback.models import JobLock


def job_lock_acquire(*, name: str, seconds: float, user: AbstractBaseUser | None = None) -> JobLock | None:
    """The lock ``name`` for ``seconds``, or None while someone else holds it. Atomic: of two
    requests at once (a double click), the database's primary key lets exactly one in."""
    now = timezone.now()
    with transaction.atomic():
        JobLock.objects.filter(name=name, expires_at__lte=now).delete()
        try:
            with transaction.atomic():
                return JobLock.objects.create(
                    name=name,
                    token=uuid.uuid4().hex,
                    acquired_at=now,
                    expires_at=now + timedelta(seconds=seconds),
                    acquired_by=user if user is not None and user.is_authenticated else None,
                )
        except IntegrityError:
            return None


def job_lock_held(name: str) -> JobLock | None:
    """The lock ``name`` if someone holds it now."""
    return JobLock.objects.filter(name=name, expires_at__gt=timezone.now()).select_related("acquired_by").first()


def job_lock_renew(*, name: str, token: str, seconds: float) -> bool:
    """Extend the holder's lock from now (a job starting after a wait in the queue); False when
    it is no longer the holder's (expired and taken by someone else, or released)."""
    until = timezone.now() + timedelta(seconds=seconds)
    return JobLock.objects.filter(name=name, token=token).update(expires_at=until) == 1


def job_lock_release(*, name: str, token: str) -> None:
    JobLock.objects.filter(name=name, token=token).delete()


# The demo loop (strategies page): held from the click until the loop ends. Longer than
# demo_loop_task's time limit (15 minutes), so a loop still running is never freed under it.
DEMO_LOOP = "demo-loop"
DEMO_LOOP_SECONDS = 20 * 60

# The learning cycle (strategies/cycle.py): one at a time, renewed after every run, so the lock of a
# cycle whose process was killed lapses within this (a run on a real model takes a minute or two).
LEARNING_CYCLE = "learning-cycle"
LEARNING_CYCLE_SECONDS = 15 * 60
