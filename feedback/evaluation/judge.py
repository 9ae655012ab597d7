"""The judge evaluator: an LLM through the openai SDK when an endpoint is configured, and an
offline heuristic judge otherwise, named as such everywhere so it is never taken for an LLM."""

import json
import re
from typing import Any

from django.conf import settings
from django.db.models import Count, Q

from feedback.agent.llm import use_endpoint
from feedback.agent.llm.formats import FormatError, json_completion
from feedback.models import Run, Step
from feedback.models.evaluation import OFFLINE_JUDGE_NAME

from .evaluators import EvaluatorError, Verdict, normalise, numbers_in, refusal_in

JUDGE_SCHEMA = {
    "type": "object",
    "properties": {
        "score": {"type": "number", "description": "0 = useless, 1 = fully correct and complete"},
        "accomplished": {"type": "boolean", "description": "true only if the answer does what the task asked"},
        "feedback": {"type": "string", "description": "one or two sentences: what is right or wrong"},
    },
    "required": ["score", "accomplished", "feedback"],
    "additionalProperties": False,
}

JUDGE_PROMPT = """You grade the final answer an AI agent gave to a task.
Reply with JSON only:
{"score": <number from 0 to 1>, "accomplished": <true or false>, "feedback": "<one or two sentences>"}.
Score 1 for a correct, complete, well-supported answer; 0 for a wrong or missing one.
"accomplished" is true only if the answer does what the task asked. An answer that refuses, says
it could not find or do something, does not know, or only restates the task is not accomplished,
however polite or long it is.
Grade the answer against the task; an expected answer, when given, is the reference."""

_STOPWORDS = frozenset(
    "the a an and or of in on to for with is are be it its this that what how many much from by as at "
    "into their them then than these those which who whom whose your you our all any each".split()
)


def _judge_by_llm() -> bool:
    # LLM_JUDGE_BACKEND "offline" keeps the heuristic judge while the agent uses an endpoint: a
    # small local model judging its own answers is slow and adds little a reference does not.
    return settings.LLM_JUDGE_BACKEND != "offline" and use_endpoint()


def judge_name() -> str:
    """The evaluator name recorded on the evaluation: which judge actually gave the score."""
    if _judge_by_llm():
        return f"llm_judge:{settings.LLM_JUDGE_MODEL}"
    return OFFLINE_JUDGE_NAME


def judge_evaluator(run: Run, config: dict) -> Verdict:
    if _judge_by_llm():
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


def parse_judge_reply(content: str) -> tuple[float, bool, str]:
    """The judge's JSON, read strictly: an object with a number score in [0, 1], a boolean
    ``accomplished`` (true or false, not "yes", 1 or null) and a feedback string. Anything else
    is the judge's failure, not a score."""
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
    accomplished = data.get("accomplished")
    if not isinstance(accomplished, bool):
        raise EvaluatorError(
            f"The judge's accomplished is not true or false: {accomplished!r}", {"reply": content[:500]}
        )
    if not isinstance(feedback, str):
        raise EvaluatorError("The judge's feedback is not a string.", {"reply": content[:500]})
    return float(score), accomplished, feedback


def llm_judge(run: Run, config: dict) -> Verdict:
    model = config.get("model") or settings.LLM_JUDGE_MODEL
    options = {"max_tokens": settings.LLM_JUDGE_MAX_TOKENS} if settings.LLM_JUDGE_MAX_TOKENS else {}
    try:
        # The strictest JSON format the endpoint takes (the adapter remembers those it refused).
        answer = json_completion(
            model=model,
            messages=_judge_messages(run),
            schema=JUDGE_SCHEMA,
            name="judgement",
            temperature=0,
            **options,
        )
    except FormatError as exc:
        if exc.timed_out:
            raise EvaluatorError(
                f"The judge timed out after {settings.LLM_TIMEOUT_SECONDS:g} s.", {"reason": "timeout"}
            ) from exc
        raise EvaluatorError(f"The judge could not be reached: {exc}", {"refused_formats": exc.refused}) from exc
    score, accomplished, feedback = parse_judge_reply(answer.text)
    return Verdict(
        score=score,
        feedback=feedback,
        accomplished=accomplished,
        details={
            "model": model,
            "response_format": answer.response_format,
            **({"refused_formats": answer.refused} if answer.refused else {}),
            "tokens_in": answer.tokens_in,
            "tokens_out": answer.tokens_out,
        },
    )


def _content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"[^\W\d_]{3,}", normalise(text)) if w not in _STOPWORDS}


# Words that carry no answer: "Done.", "OK, will do", "Here is the result".
_FILLER = frozenset(
    "done okay sure fine completed complete finished task tasks will here answer result results see "
    "below above following now ready thanks thank has have had was were been not but can could would "
    "should may might also just very there they she him her his our out get got let".split()
)
# A real answer scores at least this; below it the judge says the task was not accomplished.
ACCOMPLISHED_AT = 0.5


def _new_information(task: str, output: str) -> list[str]:
    """What the answer says that the task did not: its own words and numbers."""
    words = _content_words(output) - _content_words(task) - _FILLER
    task_numbers = set(numbers_in(task))
    return sorted(words) + [f"{n:g}" for n in sorted(set(numbers_in(output)) - task_numbers)]


def offline_heuristic_judge(run: Run, config: dict) -> Verdict:
    """A deterministic stand-in for a judge, named as such: no model reads the answer.

    It looks for the ways an answer fails without a reference: the run did not answer, the
    answer is empty, gives up ("I could not find…", "I don't know", a refusal), or only echoes
    the task (nothing in it the task did not already say, "Done."). Any of these scores below
    0.3 and is judged not accomplished. An answer that says something new scores 0.55, plus up
    to 0.15 each for talking about what the task asked (its words), for tool calls that went
    through, and for substance (new words and numbers, three or more for the full 0.15); it is
    judged accomplished. The score is a heuristic, not a grade: a reference or a person decides
    better, and outranks it."""
    output = (run.final_output or "").strip()
    task_text = run.task.text
    counted = run.steps.filter(kind=Step.Kind.TOOL_CALL).aggregate(
        calls=Count("pk"), failed=Count("pk", filter=Q(success=False))
    )
    calls, failed_calls = counted["calls"], counted["failed"]
    refusal = refusal_in(output)
    new = _new_information(task_text, output)
    task_words = _content_words(task_text)
    parts: dict[str, Any] = {
        "answered": 1.0 if run.status == Run.Status.SUCCEEDED and output else 0.0,
        "no_refusal": 0.0 if refusal else 1.0,
        "new_information": len(new),
        "on_topic": len(task_words & _content_words(output)) / len(task_words) if task_words else 1.0,
        "clean_tools": 1.0 - failed_calls / calls if calls else 1.0,
    }
    if run.status != Run.Status.SUCCEEDED:
        score, problem = 0.0, f"the run ended {run.status} without an answer"
    elif not output:
        score, problem = 0.0, "the answer is empty"
    elif refusal:
        score, problem = 0.1, f"the answer gives up (“{refusal}”)"
    elif not new:
        score, problem = 0.2, "the answer only restates the task: nothing in it is new"
    else:
        substance = min(1.0, len(new) / 3)
        score = 0.55 + 0.15 * parts["on_topic"] + 0.15 * parts["clean_tools"] + 0.15 * substance
        problem = ""
    notes = [problem] if problem else []
    if problem == "" and parts["on_topic"] < 0.5:
        notes.append("the answer mentions few of the task's words")
    if failed_calls:
        notes.append(f"{failed_calls} of {calls} tool calls failed")
    summary = "; ".join(notes) if notes else "no problems found"
    return Verdict(
        score=round(score, 4),
        feedback=f"Offline heuristic judge (no LLM): {summary}.",
        details={"parts": parts, "new_information": new[:20]},
        accomplished=score >= ACCOMPLISHED_AT,
    )
