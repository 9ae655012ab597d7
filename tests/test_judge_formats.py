"""The LLM judge on endpoints that refuse structured output: llama.cpp's server answers a
json_schema response format with a 500, some servers refuse json_object too. The judge falls back
to a looser format, says which it used, and stops asking for what an endpoint refused."""

import pytest

from feedback.evaluation.evaluators import EvaluatorError
from feedback.evaluation.judge import llm_judge
from feedback.models import Run

from .factories import make_run

pytestmark = pytest.mark.django_db


def _run() -> Run:
    return make_run(text="What is 6 * 7?", status=Run.Status.SUCCEEDED, final_output="42")


def _formats(server) -> list[str]:
    return [(r.get("response_format") or {}).get("type", "prompt") for r in server.requests]


def test_a_strict_endpoint_is_asked_once_for_its_json_schema(judge_server):
    verdict = llm_judge(_run(), {})
    assert _formats(judge_server) == ["json_schema"]
    assert verdict.details["response_format"] == "json_schema" and "refused_formats" not in verdict.details
    assert judge_server.requests[0]["max_tokens"] == 300


def test_a_refused_json_schema_falls_back_to_json_object(judge_server):
    judge_server.refused_formats = {"json_schema"}
    judge_server.score = 0.9
    verdict = llm_judge(_run(), {})
    assert verdict.score == 0.9 and verdict.accomplished
    assert _formats(judge_server) == ["json_schema", "json_object"]
    assert verdict.details["response_format"] == "json_object"
    assert verdict.details["refused_formats"] == ["json_schema: 500"]
    # Known unsupported from now on: the next judgement makes one call.
    llm_judge(_run(), {})
    assert _formats(judge_server) == ["json_schema", "json_object", "json_object"]


def test_with_every_format_refused_the_prompt_alone_is_read_from_prose(judge_server):
    judge_server.refused_formats = {"json_schema", "json_object"}
    judge_server.refusal_status = 400
    judge_server.prose_without_format = True
    judge_server.score, judge_server.accomplished = 0.2, False
    verdict = llm_judge(_run(), {})
    assert (verdict.score, verdict.accomplished) == (0.2, False)
    assert _formats(judge_server) == ["json_schema", "json_object", "prompt"]
    assert verdict.details["response_format"] == "prompt"
    assert "response_format" not in judge_server.requests[-1]


def test_an_outage_is_not_taken_for_a_refused_format(judge_server):
    judge_server.refused_formats = {"json_schema"}
    judge_server.refusal_status = 503
    with pytest.raises(EvaluatorError, match="could not be reached"):
        llm_judge(_run(), {})
    assert _formats(judge_server) == ["json_schema"]  # no looser format tried on a 503
    judge_server.refused_formats = set()
    assert llm_judge(_run(), {}).details["response_format"] == "json_schema"  # not remembered as refused


def test_an_endpoint_refusing_everything_fails_the_judgement_with_the_reason(judge_server):
    judge_server.refused_formats = {"json_schema", "json_object", "prompt"}
    with pytest.raises(EvaluatorError, match=r"could not be reached.*500"):
        llm_judge(_run(), {})
    assert _formats(judge_server) == ["json_schema", "json_object", "prompt"]
