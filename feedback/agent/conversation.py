"""The messages the model sees, rebuilt from the recorded steps (so a run can resume)."""

import json
from itertools import groupby
from typing import Any

from feedback.models import Run, Step

from .answers import GUARDRAIL_REFUSED

REFUSAL_NOTE = "A rule of the runtime refused this call: follow it; it is for you, never to be quoted in your answer."


def observation_of(step: Step) -> str:
    if step.success:
        payload: dict[str, Any] = {"ok": True, "result": step.result}
        if step.stale:
            payload["note"] = "The tool is unavailable; this is its last known result and may be stale."
        return json.dumps(payload, ensure_ascii=False)
    if step.error_class == GUARDRAIL_REFUSED:
        # Marked as the runtime's rule, apart from what a tool said: an answer may report a tool's
        # error, never a refusal's wording (answers.quoted_refusal holds the loop to it).
        payload = {"ok": False, "refused_by": "guardrail", "error": step.error, "note": REFUSAL_NOTE}
        return json.dumps(payload, ensure_ascii=False)
    return json.dumps({"ok": False, "error": step.error}, ensure_ascii=False)


def _assistant_message(thought: str, calls: list[Step]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": thought}
    if calls:
        message["tool_calls"] = [
            {
                "id": c.tool_call_id,
                "type": "function",
                "function": {
                    "name": c.tool_name,
                    "arguments": c.arguments if isinstance(c.arguments, str) else json.dumps(c.arguments),
                },
            }
            for c in calls
        ]
    return message


def recorded_steps(run: Run) -> list[Step]:
    """The run's steps as the conversation needs them, in order."""
    # "run" must be loaded too: the related manager checks each step's run_id, and a deferred
    # run_id cost one query per step, per turn (quadratic in the run's length).
    return list(
        run.steps.order_by("index").only(
            "run", "turn", "kind", "thought", "tool_name", "tool_call_id", "arguments", "result", "error",
            "error_class", "success", "stale",
        )
    )  # fmt: skip


def turn_messages(steps: list[Step]) -> list[dict[str, Any]]:
    """The messages of ``steps`` (whole turns, in order) after the system prompt and the task."""
    messages: list[dict[str, Any]] = []
    for _, group in groupby(steps, key=lambda s: s.turn):
        turn = list(group)
        thought = "\n".join(s.thought for s in turn if s.kind in (Step.Kind.THOUGHT, Step.Kind.FINAL))
        calls = [s for s in turn if s.kind == Step.Kind.TOOL_CALL]
        if thought or calls:
            messages.append(_assistant_message(thought, calls))
        messages.extend({"role": "tool", "tool_call_id": c.tool_call_id, "content": observation_of(c)} for c in calls)
        messages.extend(
            {"role": "user", "content": s.thought}
            for s in turn
            if s.kind in (Step.Kind.REFLECTION, Step.Kind.MODEL_ERROR) and s.thought
        )
    return messages


def conversation(run: Run, steps: list[Step] | None = None) -> list[dict[str, Any]]:
    """The messages for the model. ``steps``: the run's steps when the caller already holds them
    (the loop keeps the steps it wrote), else they are read from the database."""
    if steps is None:
        steps = recorded_steps(run)
    return [
        {"role": "system", "content": run.system_prompt},
        {"role": "user", "content": run.task.text},
        *turn_messages(steps),
    ]


class Conversation:
    """The messages of a running run, extended by each turn's steps as the loop writes them.

    Rebuilding them from every step at every turn cost a pass over the whole run per turn
    (quadratic in its length); only the steps added since the last turn are converted here.
    """

    def __init__(self, run: Run, steps: list[Step]) -> None:
        self.run, self.steps = run, steps  # ``steps``: the list the recorder appends to
        self._messages = conversation(run, steps)
        self._converted = len(steps)

    def messages(self) -> list[dict[str, Any]]:
        """The messages for the model's next call (a fresh list: a model may keep what it got)."""
        new = self.steps[self._converted :]
        if new:
            if self._converted and new[0].turn == self.steps[self._converted - 1].turn:
                # The last converted turn went on: its messages must be merged, so start over.
                self._messages = conversation(self.run, self.steps)
            else:
                self._messages.extend(turn_messages(new))
            self._converted = len(self.steps)
        return list(self._messages)
