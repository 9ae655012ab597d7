"""The trace as JSON: the whole run for download, or one step for "copy as JSON"."""

import json
from collections.abc import Iterator

from django.core.serializers.json import DjangoJSONEncoder
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404

from feedback import traces
from feedback.models import Run

from .runs import _visible_run

# Steps per query while streaming: memory stays flat for a run of any length.
STREAM_BATCH = 500


def run_trace_json(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _visible_run(request, run_id)
    if "step" in request.GET:
        step = get_object_or_404(
            run.steps.prefetch_related("attempt_rows", "child_runs"), index=_int(request.GET["step"])
        )
        return JsonResponse(traces.step_as_dict(step), json_dumps_params={"ensure_ascii": False, "indent": 2})
    response = StreamingHttpResponse(_stream_trace(run), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="run-{run.pk}-trace.json"'
    return response


def _int(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        return -1


def _dumps(value: object) -> str:
    return json.dumps(value, cls=DjangoJSONEncoder, ensure_ascii=False)


def _stream_trace(run: Run) -> Iterator[str]:
    """``{...run..., "steps": [...]}`` written a batch of steps at a time, keyset by index."""
    header = traces.run_as_dict(run)
    yield _dumps(header)[:-1] + ', "steps": ['
    after, first = -1, True
    while True:
        page = traces.trace_page(run, after=after, limit=STREAM_BATCH)
        for step in page.steps:
            yield ("" if first else ",") + "\n" + _dumps(traces.step_as_dict(step))
            first = False
        if not page.has_more:
            break
        after = page.last_index
    yield "\n]}\n"
