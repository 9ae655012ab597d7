"""OpenTelemetry export of runs (``OTEL_EXPORT_RUNS``, off by default).

Once a run has been evaluated, a worker task (``queue.run_export``) builds the run's spans from
what was recorded, in the OpenTelemetry GenAI semantic conventions, and sends them with the
official SDK's OTLP/HTTP exporter to the endpoint the standard variables name
(``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_HEADERS``...): an OpenTelemetry Collector,
Langfuse, Arize Phoenix, LangSmith. Built after the run, the export never slows or breaks the
agent loop, and a run resumed after its worker died is exported once, whole.

A run is one trace (a sub-agent's run joins the trace of the run that delegated to it)::

    invoke_agent {task kind}     the run; a sub-agent's run hangs from its delegate call's span
      chat {model}               one per model call (a turn of the loop), with its tokens
      execute_tool {tool}        one per tool call, error.type when it failed
      (events)                   gen_ai.evaluation.result per evaluation of its first round, reflections
      evaluation {evaluator}     an EVALUATOR span per evaluation given after the export

Ids are derived from the run, its steps and its evaluations (an HMAC keyed by SECRET_KEY: stable,
and distinct between installations sending to one backend), so a retry sends the same spans,
which a receiver that keys spans by id keeps once. What comes after the run's export (a
reviewer's score, a re-evaluation's round) is sent as new spans of its own
(``queue.evaluations_export``), never as the run's spans again: receivers keep the first copy of a
span (Phoenix ignores a span id it has), and OpenInference says ended spans are not re-exported.

Timing: a tool span has its call's recorded start and end, and a model call's span its step's
(a turn recorded before model calls were timed gets a model call of no length at the last moment
known before it: nothing is made up). builder.py places and times the spans; attributes.py says
what each one carries.

Privacy: without ``OTEL_CAPTURE_CONTENT`` nothing a person, the model or a tool wrote leaves
the installation: names, ids, counts, times, error classes and scores only. With it, the stored
values, which are masked (feedback/privacy.py); with ``PRIVACY_MASKING`` off, no content is
sent whatever ``OTEL_CAPTURE_CONTENT`` says.
"""

from .builder import evaluation_spans, run_spans
from .config import BATCH_SPANS, CONTENT_MAX_CHARS, NS, SCOPE, capture_content
from .errors import ExportFailed, ExportNotReady
from .export import evaluations_export, run_trace_export
from .ids import span_id_of, trace_id_of
from .values import _json, _nanos

__all__ = [
    "BATCH_SPANS",
    "CONTENT_MAX_CHARS",
    "NS",
    "SCOPE",
    "ExportFailed",
    "ExportNotReady",
    "_json",
    "_nanos",
    "capture_content",
    "evaluation_spans",
    "evaluations_export",
    "run_spans",
    "run_trace_export",
    "span_id_of",
    "trace_id_of",
]
