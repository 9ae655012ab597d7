"""Structured answers: one JSON answer from the endpoint, asked for in the strictest response format
it takes (a JSON Schema response, then a JSON object, then the prompt alone), as the endpoint
refuses each; a refused format is not asked for again. The judge and the proposal writer use it.
"""

import re
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from .adapter import create, usage
from .reply import LLMError

# Strictest first. llama.cpp's server answers a json_schema response format with a 500, some
# servers refuse json_object too; the prompt alone always goes.
RESPONSE_FORMATS = ("json_schema", "json_object", "prompt")
# Formats an endpoint (base URL, model) refused while a looser one then worked: not asked for
# again by this process, so each request costs one call, not three.
_refused_formats: set[tuple[str, str, str]] = set()
# Statuses that say "not this request" rather than "not now": a 429 or a gateway's 502-504 is an
# outage, and trying a looser format would hide it.
_REFUSALS = frozenset({400, 404, 415, 422, 500, 501})
_OBJECT = re.compile(r"\{.*\}", re.S)


@dataclass(frozen=True)
class JSONAnswer:
    text: str  # the reply's JSON: all of it under a format; the outermost braces of a prompt-only one
    response_format: str
    refused: list[str]  # the formats refused on the way, "json_schema: 500"
    tokens_in: int
    tokens_out: int


class FormatError(LLMError):
    """No format was answered; ``refused``: those refused before the failure."""

    def __init__(self, error: LLMError, refused: list[str]) -> None:
        super().__init__(str(error), retryable=error.retryable, timed_out=error.timed_out)
        self.refused = refused


def _response_format(kind: str, name: str, schema: dict) -> Any:
    if kind == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": name, "strict": True, "schema": schema}}
    return {"type": "json_object"} if kind == "json_object" else None


def _said(refused: list[tuple[str, int]]) -> list[str]:
    return [f"{kind}: {status}" for kind, status in refused]


def json_completion(
    *, model: str, messages: list[dict[str, str]], schema: dict, name: str, **options: Any
) -> JSONAnswer:
    """One JSON answer from ``model``, asked for as ``schema`` (named ``name``) in the strictest
    format the endpoint takes; FormatError when it answers none."""
    import openai

    from .client import openai_client

    client, endpoint = openai_client(), (settings.OPENAI_BASE_URL, model)
    refused: list[tuple[str, int]] = []
    for kind in RESPONSE_FORMATS:
        if (*endpoint, kind) in _refused_formats:
            continue
        response_format = _response_format(kind, name, schema)
        extra = {"response_format": response_format} if response_format is not None else {}
        try:
            response = create(client, model=model, messages=messages, **options, **extra)
        except LLMError as exc:
            status = getattr(exc.__cause__, "status_code", None)
            if isinstance(exc.__cause__, openai.APIStatusError) and status in _REFUSALS and kind != "prompt":
                refused.append((kind, status))
                continue
            raise FormatError(exc, _said(refused)) from exc
        break
    # A looser format answered: the stricter ones were refused for what they are, not by chance.
    _refused_formats.update((*endpoint, refused_kind) for refused_kind, _ in refused)
    content = (response.choices[0].message.content if response.choices else None) or ""
    if kind == "prompt":  # a model may wrap its JSON in prose or a code fence
        found = _OBJECT.search(content)
        content = found.group(0) if found else content
    return JSONAnswer(text=content, response_format=kind, refused=_said(refused), **usage(response))
