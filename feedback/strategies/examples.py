"""A proposal's worked examples: a few short successful trajectories of similar tasks, put into
the system prompt of every run the strategy applies to.

Small models follow experience shown better than rules told (Agent Workflow Memory, ExpeL), so a
proposal carries up to ``MAX_EXAMPLES`` of them, of different tasks: the same model's own runs
first (the evidence runs' model: what it did right, in its own tool-calling style), then any
other's. Each is short (the calls it made and its answer, cut to a few lines), and masked: an
email address in it becomes ``<email>``, since the prompt is read by every run it applies to.

Every reader of that prompt sees it, so it comes only from a run everyone may see: never one on
a private workspace (a person's uploads: ``Workspace.owner`` set), never an experiment's or a
playground's run (whose items may be private too), only a production run that succeeded,
accomplished its task and had no failed step.
"""

import json
import re
from collections.abc import Iterable

from django.db.models import Case, Count, IntegerField, Value, When

from feedback.models import Run, Step

MAX_EXAMPLES = 3
MAX_CALLS = 6
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")


def masked(text: str, limit: int) -> str:
    text = _EMAIL.sub("<email>", " ".join(text.split()))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def evidence_model(run_ids: Iterable[int]) -> str:
    """The model most of the evidence runs ran on ("" when none is recorded)."""
    row = (
        Run.objects.filter(pk__in=list(run_ids))
        .exclude(model_name="")
        .values("model_name")
        .annotate(n=Count("pk"))
        .order_by("-n", "model_name")
        .first()
    )
    return row["model_name"] if row else ""


def _trajectory(run: Run) -> str:
    lines = [f"Task: {masked(run.task.text, 200)}"]
    calls = run.steps.filter(kind=Step.Kind.TOOL_CALL).exclude(tool_name="update_plan").order_by("index")
    for step in calls[:MAX_CALLS]:
        lines.append(f"- {step.tool_name}({masked(json.dumps(step.arguments), 120)}) -> ok")
    lines.append(f"Final answer: {masked(run.final_output, 200)}")
    return "\n".join(lines)


def worked_example(task_kind: str, tool: str = "", model_name: str = "") -> str:
    """Up to MAX_EXAMPLES successful trajectories of different similar tasks that anyone may
    read, ``model_name``'s own first, as one text; "" when there is none."""
    runs = (
        Run.objects.filter(
            task_kind=task_kind,
            status=Run.Status.SUCCEEDED,
            outcome=Run.Outcome.ACCOMPLISHED,
            purpose=Run.Purpose.PRODUCTION,
        )
        .exclude(steps__success=False)
        .exclude(task__workspace__owner__isnull=False)
    )
    if tool:
        runs = runs.filter(steps__tool_name=tool)
    own = Case(When(model_name=model_name, then=Value(0)), default=Value(1), output_field=IntegerField())
    # The join on steps may repeat a run: the choice below keeps one per task.
    candidates = runs.select_related("task").order_by(own, "-score", "-created_at")[: MAX_EXAMPLES * 8]
    chosen, tasks = [], set()
    for run in candidates:
        if run.task.text not in tasks:
            tasks.add(run.task.text)
            chosen.append(run)
        if len(chosen) == MAX_EXAMPLES:
            break
    return "\n\n".join(_trajectory(run) for run in chosen)
