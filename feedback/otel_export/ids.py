"""Trace and span ids derived from the run and its steps, and the SDK hook that hands them out."""

import hashlib
import hmac

from django.conf import settings
from opentelemetry.sdk.trace.id_generator import IdGenerator


def _digest(key: str) -> bytes:
    return hmac.new(settings.SECRET_KEY.encode(), f"otel:{key}".encode(), hashlib.sha256).digest()


def trace_id_of(top_run_id: int) -> int:
    return int.from_bytes(_digest(f"trace:{top_run_id}")[:16]) or 1


def span_id_of(key: str) -> int:
    return int.from_bytes(_digest(key)[:8]) or 1


class _RecordedIds(IdGenerator):
    """The SDK's hook for span ids, handing out the ids decided for the next span."""

    def __init__(self) -> None:
        self.trace_id = self.span_id = 0

    def generate_trace_id(self) -> int:
        return self.trace_id

    def generate_span_id(self) -> int:
        return self.span_id
