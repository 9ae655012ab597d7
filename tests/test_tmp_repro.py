import pytest
from feedback.agent.loop import execute_run
from feedback.models import Task
from .factories import make_run
pytestmark = pytest.mark.django_db

def test_repro(demo_workspace):
    run = make_run(text="Summarise release-notes.txt", kind=Task.Kind.FILE_ANALYSIS, workspace=demo_workspace)
    execute_run(run.pk)
    run.refresh_from_db()
    for s in run.steps.order_by("index"):
        print(s.index, s.turn, s.kind, s.tool_name, s.error_class, repr(s.thought[:300]), repr(s.error[:200]))
    print(run.status, repr(run.final_output), run.error)
