"""What the export is configured with: its constants, and whether content may be sent."""

import logging

from django.conf import settings

from feedback import privacy

# The package's one logger, under the name it had when the export was a single module.
logger = logging.getLogger(__package__)

SCOPE = "agent_feedback.runs"
# Our own attributes, beside the gen_ai.* ones.
NS = "agent_feedback."
# Spans per request: a run of ten thousand steps goes in several.
BATCH_SPANS = 512
# Captured content is cut to this many characters per attribute, unless the standard
# OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT (or its span-only form) says otherwise.
CONTENT_MAX_CHARS = 16_384
_LENGTH_LIMIT_VARIABLES = ("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT")


def capture_content() -> bool:
    if settings.OTEL_CAPTURE_CONTENT and not privacy.enabled():
        logger.warning("OTEL_CAPTURE_CONTENT is ignored: PRIVACY_MASKING is off, and content is only sent masked")
        return False
    return settings.OTEL_CAPTURE_CONTENT
