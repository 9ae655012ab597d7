"""The export task's errors: what makes it retry."""

from feedback.retrying import TransientError


class ExportFailed(TransientError):
    """The spans did not reach the receiver (down, refused, 4xx/5xx, timeout): the task retries."""


class ExportNotReady(ExportFailed):
    """A sub-agent's run whose delegate call its parent has not recorded yet: exported later,
    under that call's span."""
