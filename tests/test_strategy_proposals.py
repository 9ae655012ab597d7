"""Proposal text generalises: no expected answer, no number from one, no file name of the evidence.

Issue 15: on a real small model the proposals read "meets the exact number of words specified by
80" and "make sure the final answer addresses: Expected 49": the evaluator's text, pasted into
the prompt of every later run, carried the reference answers with it.
"""

import re

import pytest

from feedback.models import Evaluation, Run, Step, Strategy, Task
from feedback.strategies.proposals import mine_and_propose

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("mining_thresholds")]

EXPECTED = {"file_analysis": r"/\b80 words/", "arithmetic": "49"}
FILES = ("quarterly-report.txt", "docs/release-notes.md")


def _run(*, kind, text, expected="", good, steps=(), feedback=()):
    task = Task.objects.create(text=text, kind=kind, expected_answer=expected)
    run = Run.objects.create(
        task=task, task_kind=kind, status="succeeded", score=0.95 if good else 0.2,
        outcome="accomplished" if good else "not_accomplished", final_output="done",
    )  # fmt: skip
    for index, (tool, arguments, error) in enumerate(steps):
        Step.objects.create(
            run=run, index=index, turn=index, kind="tool_call", tool_name=tool, arguments=arguments,
            success=not error, error=error, error_class="ToolError" if error else "",
            error_signature=f"sig-{tool}-{error[:12]}" if error else "",
        )  # fmt: skip
    for evaluator, evaluation_kind, text in feedback:
        Evaluation.objects.create(run=run, evaluator=evaluator, kind=evaluation_kind, score=0.0, feedback=text)
    return run


def leaky_history() -> None:
    """Failing runs whose errors name their files and whose evaluators quote the expected answers."""
    for i in range(8):
        _run(
            kind="file_analysis", text=f"Summarise {FILES[0]} in {FILES[1]} and count its words ({i})",
            expected=EXPECTED["file_analysis"], good=False,
            steps=[("read_text_file", {"path": FILES[0]}, f"No such file: {FILES[0]}"),
                   ("read_text_file", {"path": FILES[1]}, "")],
            feedback=[("reference", "reference", "The answer does not match /\\b80 words/."),
                      ("judge", "judge", "The summary does not meet the exact number of words specified by 80.")],
        )  # fmt: skip
        _run(
            kind="arithmetic", text=f"What is seven times seven? ({i})", expected=EXPECTED["arithmetic"], good=False,
            steps=[("calculator", {"expression": "7*7"}, "")],
            feedback=[("reference", "reference", "Expected 49; the answer has no numbers.")],
        )  # fmt: skip
    for i in range(12):
        _run(kind="file_analysis", text=f"Summarise notes-{i}.txt", good=True,
             steps=[("read_text_file", {"path": f"notes-{i}.txt"}, "")])  # fmt: skip
        _run(kind="arithmetic", text=f"What is {i} plus one?", good=True,
             steps=[("calculator", {"expression": f"{i}+1"}, "")])  # fmt: skip


def _leaks(text: str) -> list[str]:
    found = [name for name in (*FILES, "release-notes.md", "quarterly-report") if name.lower() in text.lower()]
    found += [n for n in ("80", "49") if re.search(rf"(?<![\w.]){n}(?![\d])", text)]
    return found + [e for e in EXPECTED.values() if e.lower() in text.lower()]


def test_proposals_never_quote_expected_answers_numbers_or_file_names():
    leaky_history()
    strategies = mine_and_propose(window_days=30)
    kinds = {s.pattern_kind for s in strategies}
    assert {"error_signature", "evaluator_feedback"} <= kinds  # the patterns were found
    for strategy in Strategy.objects.select_related("current_version"):
        version = strategy.current_version
        for text in (strategy.title, version.new_guidance):
            assert _leaks(text) == [], (strategy.pattern_key, text)


def test_guidance_is_written_from_the_kind_of_feedback_not_pasted_from_it():
    leaky_history()
    mine_and_propose(window_days=30)
    reference = Strategy.objects.get(pattern_key="evaluator_feedback:arithmetic:reference")
    guidance = reference.current_version.new_guidance
    assert "Expected" not in guidance and "addresses:" not in guidance
    assert "check it against each thing the task asks for" in guidance
    # The evidence keeps the evaluator's own words for the reviewer, outside the prompt.
    assert reference.evidence_summary["feedback"].startswith("Expected 49")


def test_a_model_written_proposal_that_quotes_the_evidence_is_refused(settings):
    from .fake_openai import model_writing

    leaky_history()
    with model_writing(
        settings,
        '{"title": "Write 80 words", "guidance": "Make sure the summary of quarterly-report.txt meets the exact '
        'number of words specified by 80; the answer is 49."}',
    ) as endpoint:
        mine_and_propose(window_days=30)
        prompts = [r["messages"][0]["content"] for r in endpoint.requests]
    assert prompts  # the model was asked
    for prompt in prompts:
        assert _leaks(prompt) == [], prompt  # the evidence it was shown was generalised too
    for strategy in Strategy.objects.select_related("current_version"):
        assert strategy.title != "Write 80 words"
        assert _leaks(strategy.title) == [] and _leaks(strategy.current_version.new_guidance) == []


def test_a_model_written_proposal_that_generalises_is_kept(settings):
    from .fake_openai import model_writing

    leaky_history()
    with model_writing(
        settings, '{"title": "Check the answer", "guidance": "Compare the final answer with what the task asks for."}'
    ):
        mine_and_propose(window_days=30)
    titles = set(Strategy.objects.values_list("title", flat=True))
    assert titles == {"Check the answer"}


def test_proposals_written_by_the_template_never_ask_the_model(settings):
    # A small local model repeats the proposal prompt's rules as its guidance: the operator can
    # keep it to the agent's work and let mining's templates write the proposals.
    from .fake_openai import model_writing

    leaky_history()
    parroted = '{"title": "Check the answer", "guidance": "Avoid quoting expected answers."}'
    with model_writing(settings, parroted) as endpoint:
        settings.STRATEGY_PROPOSAL_WRITER = "template"
        mine_and_propose(window_days=30)
        asked = len(endpoint.requests)
    assert asked == 0
    titles = set(Strategy.objects.values_list("title", flat=True))
    assert "Check the answer" not in titles and titles
    reference = Strategy.objects.get(pattern_key="evaluator_feedback:arithmetic:reference")
    assert "check it against each thing the task asks for" in reference.current_version.new_guidance


def test_the_reviewer_still_reads_the_evaluators_words_outside_the_prompt(client, reviewer):
    from django.urls import reverse

    leaky_history()
    mine_and_propose(window_days=30)
    strategy = Strategy.objects.get(pattern_key="evaluator_feedback:arithmetic:reference")
    client.force_login(reviewer)
    html = client.get(reverse("feedback-strategy-detail", args=[strategy.pk])).content.decode()
    assert '<span class="prewrap" id="evidence-example">Expected 49; the answer has no numbers.</span>' in html
    assert "never put into a prompt" in html
    guidance = html.split('id="guidance">', 1)[1].split("</dd>", 1)[0]
    assert _leaks(guidance) == [] and "check it against each thing the task asks for" in guidance


def test_a_file_name_given_as_the_text_is_learned_as_a_guardrail(tmp_path):
    # What Qwen2.5-Coder-1.5B did most in file analysis tasks: analyze_text(text="<file name>").
    from feedback.agent.errors import error_signature
    from feedback.agent.tools import ToolContext, ToolError
    from feedback.agent.tools.text import analyze_text

    for name in ("report.txt", "notes.md", "plan.txt"):
        (tmp_path / name).write_text("Words of a file.")
    for i in range(8):
        name = ("report.txt", "notes.md", "plan.txt")[i % 3]
        with pytest.raises(ToolError) as refused:
            analyze_text(ToolContext(run_id=0, workspace=tmp_path), text=name)
        run = _run(kind="file_analysis", text=f"Count the words in {name} ({i})", good=False,
                   steps=[("analyze_text", {"text": name}, str(refused.value))])  # fmt: skip
        run.steps.update(error_signature=error_signature("analyze_text", "ToolError", str(refused.value)))
    for i in range(12):
        _run(kind="file_analysis", text=f"Count the words in notes-{i}.txt", good=True,
             steps=[("analyze_text", {"path": f"notes-{i}.txt"}, "")])  # fmt: skip
    mine_and_propose(window_days=30)
    learned = Strategy.objects.get(pattern_kind="error_signature")
    assert learned.support == 8
    assert learned.current_version.guardrails == [
        {"type": "parameter_rule", "tool": "analyze_text", "param": "text", "action": "file_name_as_path"}
    ]
    assert _leaks(learned.title) == [] and "report.txt" not in learned.current_version.new_guidance
