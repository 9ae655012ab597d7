"""A proposal's worked examples (issue 25, point 3): several short trajectories of different
tasks, the evidence model's own first, masked, from runs every reader may see."""

import pytest

from feedback.agent.prompts import build_system_prompt
from feedback.models import Run, Step, Task
from feedback.strategies.examples import MAX_EXAMPLES, evidence_model, worked_example

pytestmark = pytest.mark.django_db


def _run(text, *, model="small-model", score=0.95, answer="It has 80 words.", good=True, tool="analyze_text"):
    task = Task.objects.create(text=text, kind="file_analysis")
    run = Run.objects.create(
        task=task, task_kind="file_analysis", status="succeeded", score=score, model_name=model,
        outcome="accomplished" if good else "not_accomplished", final_output=answer,
    )  # fmt: skip
    Step.objects.create(run=run, index=0, turn=0, kind="tool_call", tool_name="update_plan", arguments={}, success=True)
    Step.objects.create(
        run=run, index=1, turn=0, kind="tool_call", tool_name=tool, arguments={"path": text.split()[-1]}, success=True
    )  # fmt: skip
    return run


def test_up_to_three_different_tasks_the_evidence_model_s_own_first():
    _run("Count the words in big.txt", model="other-model", score=0.99)
    _run("Count the words in big.txt", model="other-model", score=0.99)  # the same task again
    _run("Count the words in a.txt", score=0.9)
    _run("Count the words in b.txt", score=0.85)
    _run("Count the words in c.txt", model="other-model", score=0.97)
    _run("Count the words in d.txt", model="other-model", score=0.96)
    _run("Count the words in failed.txt", good=False, score=0.99)
    example = worked_example("file_analysis", "analyze_text", model_name="small-model")
    tasks = [line for line in example.splitlines() if line.startswith("Task: ")]
    assert len(tasks) == MAX_EXAMPLES == 3
    # The model's own two runs first, then the best of the others; one run per task, never a failure.
    assert tasks == [
        "Task: Count the words in a.txt",
        "Task: Count the words in b.txt",
        "Task: Count the words in big.txt",
    ]
    assert "update_plan" not in example and '- analyze_text({"path": "a.txt"}) -> ok' in example
    assert "failed.txt" not in example


def test_an_email_address_is_masked_and_a_long_answer_cut():
    _run("Reply to maria.lopez@example.com about inbox.txt", answer="Sent to maria.lopez@example.com. " + "x" * 400)
    example = worked_example("file_analysis")
    assert "maria.lopez" not in example and example.count("<email>") == 2
    answer = next(line for line in example.splitlines() if line.startswith("Final answer: "))
    assert len(answer) <= len("Final answer: ") + 200 and answer.endswith("…")


def test_the_evidence_model_is_the_commonest_and_the_prompt_shows_every_example():
    runs = [_run(f"t{i} x.txt", model=m) for i, m in enumerate(["a", "b", "b", ""])]
    assert evidence_model(r.pk for r in runs) == "b"
    assert evidence_model([]) == ""
    prompt = build_system_prompt(["Read the file first."], ["Task: one", "Task: two"])
    assert "Worked examples: successful runs of similar tasks" in prompt
    assert prompt.index("Task: one") < prompt.index("Task: two")
