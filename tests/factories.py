"""Small builders for the rows tests need (plain functions: the model is simple enough)."""

from feedback.models import Run, Task


def make_run(*, user=None, text="What is 2 + 2?", kind=Task.Kind.ARITHMETIC, workspace=None, **run_fields) -> Run:
    task = Task.objects.create(text=text, kind=kind, created_by=user, workspace=workspace)
    return Run.objects.create(task=task, task_kind=kind, **run_fields)
