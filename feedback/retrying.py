"""The one retry policy's pieces: what every retry in the project shares.

In-process retries (a model call, a tool call, a write whose connection dropped) are tenacity's
``Retrying``, each with a predicate saying which errors are transient, a stop, one of the waits
below, and hooks that record each attempt where its caller keeps attempts (a step's attempt rows,
the log). Celery tasks retry with Celery's ``autoretry_for`` / ``retry_backoff`` / ``retry_jitter``
and the base task below, whose bound is read from settings when the task runs.
"""

from celery import Task
from django.conf import settings
from tenacity.wait import wait_base, wait_exponential, wait_random_exponential


def backoff(base_seconds: float) -> wait_base:
    """The wait before attempt n + 1: base * 2 ** (n - 1), half of it certain, half random
    ("equal jitter": full jitter could spend every attempt within milliseconds of an outage)."""
    return wait_exponential(multiplier=base_seconds / 2) + wait_random_exponential(multiplier=base_seconds / 2)


def full_jitter(base_seconds: float) -> wait_base:
    """The wait before attempt n + 1: anywhere in [0, base * 2 ** (n - 1)], so that many workers
    retrying the same failure do not come back together."""
    return wait_random_exponential(multiplier=base_seconds)


class TransientError(Exception):
    """A failure that may pass (a receiver down, a 5xx, a timeout): the class a task's
    ``autoretry_for`` names, so its module (and what it imports) loads only where the work runs."""


class SettingsRetries(Task):
    """A task whose ``max_retries`` is the setting named by ``max_retries_setting`` (plus
    ``max_retries_offset``), read at each retry: settings change without a restart in tests, and
    a decorator's argument would be frozen at import."""

    max_retries_setting = ""
    max_retries_offset = 0

    @property
    def max_retries(self) -> int:  # type: ignore[override]
        return int(getattr(settings, self.max_retries_setting)) + self.max_retries_offset
