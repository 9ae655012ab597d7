"""The export tasks' work: send an ended run's spans, or its later evaluations' spans, to the OTLP
endpoint."""

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from feedback.models import Evaluation, Run

from .builder import evaluation_spans, run_spans
from .config import BATCH_SPANS, logger
from .errors import ExportFailed


def _send(spans: list[ReadableSpan], what: str) -> None:
    exporter = OTLPSpanExporter()
    try:
        for start in range(0, len(spans), BATCH_SPANS):
            if exporter.export(spans[start : start + BATCH_SPANS]) is not SpanExportResult.SUCCESS:
                # The exporter logged the receiver's answer; a retry sends them all again.
                raise ExportFailed(f"the OTLP endpoint did not take the spans of {what}")
    finally:
        exporter.shutdown()


def run_trace_export(*, run_id: int) -> int:
    """Send the ended run's spans to the OTLP endpoint; returns how many were sent (0 for a run
    that is gone or not over). Raises ExportFailed when the receiver did not take them."""
    run = Run.objects.select_related("task").filter(pk=run_id).first()
    if run is None or run.is_active:
        return 0
    spans = run_spans(run)
    _send(spans, f"run {run_id}")
    logger.info("run %s exported: %s spans", run_id, len(spans))
    return len(spans)


def evaluations_export(*, evaluation_ids: list[int]) -> int:
    """Send evaluations given after their run's export (a reviewer's score, a re-evaluation's
    round) as spans of their own in the run's trace; returns how many were sent (0 when they
    are gone). Raises ExportFailed when the receiver did not take them."""
    evaluations = list(Evaluation.objects.filter(pk__in=evaluation_ids).select_related("run").order_by("pk"))
    by_run: dict[int, list[Evaluation]] = {}
    for evaluation in evaluations:
        by_run.setdefault(evaluation.run_id, []).append(evaluation)
    spans = [span for rows in by_run.values() for span in evaluation_spans(rows[0].run, rows)]
    if spans:
        _send(spans, f"evaluations {', '.join(map(str, evaluation_ids))}")
        logger.info("evaluations %s exported: %s spans", evaluation_ids, len(spans))
    return len(spans)
