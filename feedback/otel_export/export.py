"""The export task's work: send an ended run's spans to the OTLP endpoint."""

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from feedback.models import Run

from .builder import run_spans
from .config import BATCH_SPANS, logger
from .errors import ExportFailed


def run_trace_export(*, run_id: int) -> int:
    """Send the ended run's spans to the OTLP endpoint; returns how many were sent (0 for a run
    that is gone or not over). Raises ExportFailed when the receiver did not take them."""
    run = Run.objects.select_related("task").filter(pk=run_id).first()
    if run is None or run.is_active:
        return 0
    spans = run_spans(run)
    exporter = OTLPSpanExporter()
    try:
        for start in range(0, len(spans), BATCH_SPANS):
            if exporter.export(spans[start : start + BATCH_SPANS]) is not SpanExportResult.SUCCESS:
                # The exporter logged the receiver's answer; a retry sends the whole run again.
                raise ExportFailed(f"the OTLP endpoint did not take the spans of run {run_id}")
    finally:
        exporter.shutdown()
    logger.info("run %s exported: %s spans", run_id, len(spans))
    return len(spans)
