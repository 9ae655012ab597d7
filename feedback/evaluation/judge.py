"""The judge evaluator: an LLM through the openai SDK when an endpoint is configured, and an
offline heuristic judge otherwise, named as such everywhere so it is never taken for an LLM."""

import json
import re
from typing import Any

from django.conf import settings

from feedback.agent.llm import use_endpoint
from feedback.models import Run, Step
from feedback.models.evaluation import OFFLINE_JUDGE_NAME

from .evaluators import EvaluatorError, Verdict, normalise

JUDGE_SCHEMA = {
    "type": "object",
    "properties": {
        "score": {"type": "number", "description": "0 = useless, 1 = fully correct and complete"},
        "feedback": {"type": "string", "description": "one or two sentences: what is right or wrong"},
    },
    "required": ["score", "feedback"],
    "additionalProperties": False,
}

JUDGE_PROMPT = """You grade the final answer an AI agent gave to a task.
Reply with JSON only: {"score": <number from 0 to 1>, "feedback": "<one or two sentences>"}.
Score 1 for a correct, complete, well-supported answer; 0 for a wrong or missing one.
Grade the answer against the task; an expected answer, when given, is the reference."""

_STOPWORDS = frozenset(
    "the a an and or of in on to for with is are be it its this that what how many much from by as at "
    "into their them then than these those which who whom whose your you our all any each".split()
)


def judge_name() -> str:
    """The evaluator name recorded on the evaluation: which judge actually gave the score."""
    if use_endpoint():
        return f"llm_judge:{settings.LLM_JUDGE_MODEL}"
    return OFFLINE_JUDGE_NAME


def judge_evaluator(run: Run, config: dict) -> Verdict:
    if use_endpoint():
        return llm_judge(run, config)
    return offline_heuristic_judge(run, config)


def _judge_messages(run: Run) -> list[dict[str, str]]:
    task = run.task
    parts = [f"Task ({task.get_kind_display()}):\n{task.text}"]
    if task.expected_answer:
        parts.append(f"Expected answer:\n{task.expected_answer}")
    parts.append(f"Run status: {run.status}")
    parts.append(f"Final answer:\n{run.final_output or '(none)'}")
    if run.error:
        parts.append(f"Error:\n{run.error}")
    return [{"role": "system", "content": JUDGE_PROMPT}, {"role": "user", "content": "\n\n".join(parts)}]


def parse_judge_reply(content: str) -> tuple[float, str]:
    """The judge's JSON, read strictly: an object with a number score in [0, 1] and a feedback
    string. Anything else is the judge's failure, not a score."""
    try:
        data = json.loads(content)
    except (TypeError, ValueError) as exc:
        raise EvaluatorError(f"The judge replied with invalid JSON: {exc}", {"reply": content[:500]}) from exc
    if not isinstance(data, dict):
        raise EvaluatorError("The judge's JSON is not an object.", {"reply": content[:500]})
    score, feedback = data.get("score"), data.get("feedback")
    if isinstance(score, bool) or not isinstance(score, int | float):
        raise EvaluatorError(f"The judge's score is not a number: {score!r}", {"reply": content[:500]})
    if not 0 <= score <= 1:
        raise EvaluatorError(f"The judge's score {score} is outside 0..1.", {"reply": content[:500]})
    if not isinstance(feedback, str):
        raise EvaluatorError("The judge's feedback is not a string.", {"reply": content[:500]})
    return float(score), feedback


def llm_judge(run: Run, config: dict) -> Verdict:
    import openai

    model = config.get("model") or settings.LLM_JUDGE_MODEL
    client = openai.OpenAI(
        base_url=settings.OPENAI_BASE_URL or None,
        api_key=settings.OPENAI_API_KEY or "not-needed",
        timeout=settings.LLM_TIMEOUT_SECONDS,
        # A failed judgement is recorded and can be re-run by a reviewer; retrying here would only
        # multiply the wait on an endpoint that is already slow.
        max_retries=0,
    )
    try:
        response = client.chat.completions.create(
            model=model,
            messages=_judge_messages(run),
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "judgement", "strict": True, "schema": JUDGE_SCHEMA},
            },
            temperature=0,
        )
    except openai.APITimeoutError as exc:
        raise EvaluatorError(
            f"The judge timed out after {settings.LLM_TIMEOUT_SECONDS:g} s.", {"reason": "timeout"}
        ) from exc
    except openai.APIError as exc:
        raise EvaluatorError(f"The judge could not be reached: {type(exc).__name__}: {exc}") from exc
    content = response.choices[0].message.content if response.choices else None
    score, feedback = parse_judge_reply(content or "")
    usage = response.usage
    return Verdict(
        score=score,
        feedback=feedback,
        details={
            "model": model,
            "tokens_in": getattr(usage, "prompt_tokens", 0) or 0,
            "tokens_out": getattr(usage, "completion_tokens", 0) or 0,
        },
    )


def _content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"[^\W\d_]{4,}", normalise(text)) if w not in _STOPWORDS}


def offline_heuristic_judge(run: Run, config: dict) -> Verdict:
    """A deterministic stand-in for a judge: did the run succeed, answer at some length, talk
    about what the task asked, and get its tool calls through? Weights 0.4 / 0.2 / 0.2 / 0.2."""
    output = (run.final_output or "").strip()
    tool_steps = run.steps.filter(kind=Step.Kind.TOOL_CALL)
    calls = tool_steps.count()
    failed_calls = tool_steps.filter(success=False).count()
    task_words = _content_words(run.task.text)
    answer_words = _content_words(output)
    parts: dict[str, Any] = {
        "succeeded": 1.0 if run.status == Run.Status.SUCCEEDED else 0.0,
        "answered": min(1.0, len(output) / 20) if output else 0.0,
        "on_topic": len(task_words & answer_words) / len(task_words) if task_words and output else 0.0,
        "clean_tools": 1.0 - failed_calls / calls if calls else 1.0,
    }
    weights = {"succeeded": 0.4, "answered": 0.2, "on_topic": 0.2, "clean_tools": 0.2}
    score = sum(parts[k] * w for k, w in weights.items())
    notes = []
    if not parts["succeeded"]:
        notes.append(f"the run ended {run.status}")
    if parts["answered"] < 1:
        notes.append("the answer is missing or very short")
    if parts["on_topic"] < 0.5:
        notes.append("the answer mentions few of the task's words")
    if failed_calls:
        notes.append(f"{failed_calls} of {calls} tool calls failed")
    summary = "; ".join(notes) if notes else "no problems found"
    feedback = f"Offline heuristic judge (no LLM): {summary}."
    return Verdict(score=round(score, 4), feedback=feedback, details={"parts": parts, "weights": weights})
