"""Fixture histories for the miner: planted patterns, or pure noise."""

import random

from feedback.models import Evaluation, Run, Step, Task


def add_run(*, kind="file_analysis", text="Summarise a file", status="succeeded", score=0.9, calls=(), feedback=None,
            outcome=None):  # fmt: skip
    """A finished run with its tool calls: ``calls`` is a list of (tool, error or ""). Its
    outcome, unless given, is what the evaluators would say: an answer that scored well was
    accomplished, a failed run or a poor answer was not."""
    if outcome is None:
        good = status == "succeeded" and (score is None or score >= 0.5)
        outcome = Run.Outcome.ACCOMPLISHED if good else Run.Outcome.NOT_ACCOMPLISHED
    task = Task.objects.create(text=text, kind=kind)
    run = Run.objects.create(
        task=task, task_kind=kind, status=status, score=score, outcome=outcome, step_count=len(calls)
    )
    for index, (tool, error) in enumerate(calls):
        Step.objects.create(
            run=run, index=index, turn=index, kind="tool_call", tool_name=tool, success=not error, error=error,
            error_class="ToolError" if error else "", error_signature=f"sig-{tool}-{error[:10]}" if error else "",
            arguments={"path": "x"},
        )  # fmt: skip
    if feedback:
        Evaluation.objects.create(run=run, evaluator="judge", kind="judge", score=0.2, feedback=feedback)
    return run


def planted_history() -> dict:
    """12 failing file runs that read a missing file then list, and 20 good ones that do not;
    8 failing email runs that mention 'invoices'; 6 arithmetic answers the judge calls vague."""
    failing = [
        add_run(status="succeeded", score=0.3, text=f"Summarise notes-{i}.txt",
                calls=[("read_text_file", "No such file"), ("list_directory", "")])
        for i in range(12)
    ]  # fmt: skip
    good = [
        add_run(score=0.95, text=f"Summarise report-{i}.txt", calls=[("read_text_file", ""), ("analyze_text", "")])
        for i in range(20)
    ]
    vague = [
        add_run(kind="email_triage", status="failed", score=None, text=f"Triage the invoices batch {i}",
                calls=[("list_directory", "")])
        for i in range(8)
    ]  # fmt: skip
    vague_answers = [
        add_run(kind="arithmetic", score=0.3, text=f"What is {i} squared?", calls=[("calculator", "")],
                feedback="Too vague: give the number.")
        for i in range(6)
    ]  # fmt: skip
    vague_answers += [
        add_run(kind="arithmetic", score=0.9, text=f"What is {i} + 1?", calls=[("calculator", "")]) for i in range(6)
    ]
    fine = [add_run(kind="email_triage", score=0.9, text=f"Triage inbox {i}", calls=[("list_directory", "")])
            for i in range(10)]  # fmt: skip
    return {"failing": failing, "good": good, "vague": vague, "fine": fine, "vague_answers": vague_answers[:6]}


def noise_history(n: int = 120, seed: int = 3) -> None:
    """Scores and errors that are independent of everything: nothing to learn."""
    rng = random.Random(seed)
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"]
    for i in range(n):
        bad = rng.random() < 0.4
        error = f"glitch {i}" if rng.random() < 0.3 else ""
        add_run(
            kind=rng.choice(["file_analysis", "email_triage", "arithmetic"]),
            text=" ".join(rng.sample(words, 3)) + f" {i}",
            status="failed" if bad else "succeeded",
            score=None if bad else rng.choice([0.85, 0.9, 0.95]),
            calls=[(rng.choice(["read_text_file", "list_directory", "calculator"]), error),
                   (rng.choice(["read_text_file", "list_directory", "calculator"]), "")],
        )  # fmt: skip
