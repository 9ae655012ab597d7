"""A proposal's worked example: a successful trajectory of a similar task, put into the system
prompt of every run the strategy applies to.

Every reader of that prompt sees it, so it comes only from a run everyone may see: never one on
a private workspace (a person's uploads: ``Workspace.owner`` set), never an experiment's or a
playground's run (whose items may be private too), only a production run that succeeded,
accomplished its task and had no failed step.
"""

import json

from django.conf import settings

from feedback.models import Run, Step


def worked_example(task_kind: str, tool: str = "") -> str:
    """A successful trajectory of a similar task that anyone may read, or "" when there is none."""
    runs = (
        Run.objects.filter(
            task_kind=task_kind,
            status=Run.Status.SUCCEEDED,
            outcome=Run.Outcome.ACCOMPLISHED,
            score__gte=settings.STRATEGY_GOOD_SCORE,
        )
        .exclude(steps__success=False)
        .exclude(task__workspace__owner__isnull=False)
        .filter(purpose=Run.Purpose.PRODUCTION)
    )
    if tool:
        runs = runs.filter(steps__tool_name=tool)
    run = runs.select_related("task").order_by("-score", "-created_at").first()
    if run is None:
        return ""
    lines = [f"Task: {run.task.text[:300]}"]
    for step in run.steps.filter(kind=Step.Kind.TOOL_CALL).exclude(tool_name="update_plan").order_by("index")[:8]:
        lines.append(f"- {step.tool_name}({json.dumps(step.arguments)[:150]}) -> ok")
    lines.append(f"Final answer: {run.final_output[:300]}")
    return "\n".join(lines)
