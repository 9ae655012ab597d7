"""The sensitive tool calls waiting for a person: the confirmations page's and the API's inbox."""

from django.db.models import QuerySet

from feedback.models import Run, ToolConfirmation


def confirmations_waiting() -> QuerySet[ToolConfirmation]:
    """Pending calls of runs that wait for them, oldest first. A withdrawn call (its run ended)
    is not pending; nor is one whose run is not waiting (the moment between a worker asking and
    its run pausing), which could not be decided yet."""
    return ToolConfirmation.objects.filter(
        status=ToolConfirmation.Status.PENDING, run__status=Run.Status.AWAITING_CONFIRMATION
    ).order_by("requested_at", "pk")
