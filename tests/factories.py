"""Small builders for the rows tests need (plain functions: the model is simple enough)."""

from feedback.models import Run, Task


def make_run(*, user=None, text="What is 2 + 2?", kind=Task.Kind.ARITHMETIC, workspace=None, **run_fields) -> Run:
    task = Task.objects.create(text=text, kind=kind, created_by=user, workspace=workspace)
    return Run.objects.create(task=task, task_kind=kind, **run_fields)


def make_finished_run(
    *,
    output: str = "",
    expected_answer: str = "",
    text: str = "What is 2 + 2?",
    kind=Task.Kind.ARITHMETIC,
    status=Run.Status.SUCCEEDED,
    user=None,
    **run_fields,
) -> Run:
    """A run that has ended with ``output`` as its final answer (for evaluation and metrics)."""
    from django.utils import timezone

    task = Task.objects.create(text=text, kind=kind, created_by=user, expected_answer=expected_answer)
    run_fields.setdefault("finished_at", run_fields.get("created_at") or timezone.now())
    return Run.objects.create(task=task, task_kind=kind, status=status, final_output=output, **run_fields)


def make_calculated_run(*, text: str, good: bool, answer: str, value: int | None) -> Run:
    """An arithmetic run that ended with ``answer``, judged right (``good``) or wrong, after one
    calculator call of ``text`` that returned ``value`` (no call when ``value`` is None)."""
    run = make_run(
        text=text,
        status="succeeded",
        score=0.95 if good else 0.1,
        outcome="accomplished" if good else "not_accomplished",
        final_output=answer,
    )
    if value is not None:
        run.steps.create(
            index=0,
            kind="tool_call",
            tool_name="calculator",
            success=True,
            arguments={"expression": text},
            result={"expression": text, "value": value},
        )
    return run
