"""Delivery: each notification sent by webhook or email, one attempt per try, retried when it may pass."""

import http.client
import json
import logging
import smtplib
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlsplit

from django.conf import settings
from django.core.mail import EmailMessage, get_connection
from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q
from django.utils import timezone, translation
from django.utils.translation import gettext as _

from feedback import queue
from feedback.alerts.messages import notification, signature
from feedback.models import AlertAttempt, AlertDelivery
from feedback.retrying import TransientError

logger = logging.getLogger(__name__)

# A worker that takes an attempt holds it this much longer than the attempt's timeout.
CLAIM_MARGIN_SECONDS = 60
# A broker's clock may run a little ahead of the database's: a retry may start this early.
CLOCK_SLACK = timedelta(seconds=2)
# A pending notification whose attempt is this overdue lost its message: queue it again.
RESEND_AFTER = timedelta(minutes=2)
# What is read of a webhook receiver's answer (it only has to say 2xx).
ANSWER_READ_BYTES = 64 * 1024

SIGNATURE_HEADER = "X-Feedback-Signature"
TIMESTAMP_HEADER = "X-Feedback-Timestamp"


@dataclass(frozen=True)
class Sent:
    ok: bool
    retryable: bool = False
    status_code: int | None = None
    error: str = ""


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    # A redirected POST would arrive as a GET without its body: a receiver's 3xx is its mistake.
    def redirect_request(self, *args, **kwargs) -> None:
        return None


_opener = urllib.request.build_opener(_NoRedirects)


def send_webhook(delivery: AlertDelivery) -> Sent:
    body = json.dumps(notification(delivery), ensure_ascii=False, separators=(",", ":")).encode()
    timestamp = str(int(time.time()))
    request = urllib.request.Request(
        delivery.target,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "User-Agent": "agent-feedback-alerts/1",
            "X-Feedback-Event": f"alert.{delivery.event}",
            "X-Feedback-Delivery": str(delivery.pk),
            TIMESTAMP_HEADER: timestamp,
            SIGNATURE_HEADER: signature(delivery.incident.rule.secret, timestamp, body),
        },
    )
    timeout = settings.ALERT_DELIVERY_TIMEOUT_SECONDS
    try:
        with _opener.open(request, timeout=timeout) as answer:
            answer.read(ANSWER_READ_BYTES)
            return Sent(ok=True, status_code=answer.status)
    except urllib.error.HTTPError as exc:
        return Sent(ok=False, retryable=exc.code >= 500, status_code=exc.code, error=f"HTTP {exc.code} {exc.reason}")
    except TimeoutError:
        return Sent(ok=False, retryable=True, error=f"no answer within {timeout:g} s")
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            return Sent(ok=False, retryable=True, error=f"no answer within {timeout:g} s")
        # An address that cannot be reached may be a receiver restarting; a malformed one will not mend.
        return Sent(ok=False, retryable=isinstance(exc.reason, OSError), error=str(exc.reason))
    except (OSError, http.client.HTTPException) as exc:
        return Sent(ok=False, retryable=True, error=f"{type(exc).__name__}: {exc}")


def email_message(delivery: AlertDelivery) -> tuple[str, str]:
    """The subject and plain-text body of an alert's email."""
    payload = notification(delivery)
    incident = delivery.incident
    with translation.override(settings.LANGUAGE_CODE):
        # Each label through gettext on its own (not inside an f-string, where makemessages
        # cannot find it).
        label = {
            "alert": _("Alert"), "rule": _("Rule"), "subject": _("Subject"), "opened": _("Opened"),
            "resolved": _("Resolved"), "look": _("Look"), "history": _("History"),
        }  # fmt: skip
        state = label["resolved"] if payload["state"] == "resolved" else _("Open")
        subject = f"[{label['alert']} {state}] {payload['rule']['name']}: {payload['subject_label']}"
        lines = [
            payload["summary"],
            "",
            f"{label['rule']}: {payload['rule']['name']} ({incident.rule.get_kind_display()})",
            f"{label['subject']}: {payload['subject_label']}",
            f"{label['opened']}: {incident.opened_at:%Y-%m-%d %H:%M:%S %Z}",
        ]
        if payload["incident"]["resolved_at"]:
            lines.append(f"{label['resolved']}: {incident.resolved_at:%Y-%m-%d %H:%M:%S %Z}")
        lines += ["", f"{label['look']}: {payload['url']}", f"{label['history']}: {payload['history_url']}", "",
                  json.dumps(payload["figures"], indent=2, ensure_ascii=False)]  # fmt: skip
    # One line, whatever a rule's name holds: a newline would end the header.
    return " ".join(subject.split()), "\n".join(lines)


def send_email(delivery: AlertDelivery) -> Sent:
    subject, body = email_message(delivery)
    timeout = settings.ALERT_DELIVERY_TIMEOUT_SECONDS
    message = EmailMessage(
        subject,
        body,
        settings.DEFAULT_FROM_EMAIL,
        [delivery.target],
        headers={"X-Feedback-Delivery": str(delivery.pk)},
        connection=get_connection(fail_silently=False, timeout=timeout),
    )
    try:
        message.send()
    except smtplib.SMTPServerDisconnected as exc:
        return Sent(ok=False, retryable=True, error=f"SMTPServerDisconnected: {exc}")
    except smtplib.SMTPResponseException as exc:
        # 4xx: the server is busy or greylisting; 5xx: it refuses for good.
        code = exc.smtp_code
        return Sent(ok=False, retryable=400 <= code < 500, status_code=code, error=f"SMTP {code}: {exc.smtp_error!r}")
    except smtplib.SMTPException as exc:
        return Sent(ok=False, error=f"{type(exc).__name__}: {exc}")
    except OSError as exc:  # no mail server there, a timeout
        return Sent(ok=False, retryable=True, error=f"{type(exc).__name__}: {exc}")
    return Sent(ok=True)


SENDERS: dict[str, Callable[[AlertDelivery], Sent]] = {
    AlertDelivery.Channel.WEBHOOK: send_webhook,
    AlertDelivery.Channel.EMAIL: send_email,
}


# Celery's retry of a failed attempt (feedback/tasks.py): its backoff doubles from
# ALERT_RETRY_BACKOFF_SECONDS up to this, with full jitter.
RETRY_BACKOFF_MAX_SECONDS = 600


class DeliveryFailed(TransientError):
    """An attempt failed for a reason that may pass, and attempts are left: the task retries."""


def retry_due(attempt: int) -> float:
    """The latest the retry after ``attempt`` comes (Celery's jitter picks a wait up to it)."""
    return min(RETRY_BACKOFF_MAX_SECONDS, max(1, int(settings.ALERT_RETRY_BACKOFF_SECONDS)) * 2 ** (attempt - 1))


def alert_deliver(*, delivery_id: int) -> AlertAttempt | None:
    """Make the next attempt of a pending notification and record it (a RETRY outcome: it failed
    for a reason that may pass and attempts are left; the task then retries). None when there was
    nothing to do: delivered, given up, or taken by another worker (a duplicate message)."""
    now = timezone.now()
    hold = timedelta(seconds=settings.ALERT_DELIVERY_TIMEOUT_SECONDS + CLAIM_MARGIN_SECONDS)
    # Due, or waiting for its retry (which Celery's jitter may bring at any moment before
    # ``next_attempt_at``); never while another worker makes an attempt (its row not written yet).
    awaiting_retry = Exists(
        AlertAttempt.objects.filter(
            delivery=OuterRef("pk"), number=OuterRef("attempts"), outcome=AlertAttempt.Outcome.RETRY
        )
    )
    claimed = (
        AlertDelivery.objects.filter(
            pk=delivery_id, status=AlertDelivery.Status.PENDING, attempts__lt=settings.ALERT_DELIVERY_MAX_ATTEMPTS
        )
        .filter(Q(next_attempt_at__lte=now + CLOCK_SLACK) | awaiting_retry)
        .update(next_attempt_at=now + hold, attempts=F("attempts") + 1)
    )
    if not claimed:
        return None
    delivery = AlertDelivery.objects.select_related("incident__rule").get(pk=delivery_id)
    started, clock = timezone.now(), time.monotonic()
    try:
        sent = SENDERS[delivery.channel](delivery)
    except Exception as exc:
        # Our own mistake, not the receiver's: recorded on the history page, not retried.
        logger.exception("alert delivery %s could not be sent", delivery.pk)
        sent = Sent(ok=False, error=f"{type(exc).__name__}: {exc}")
    duration_ms = int((time.monotonic() - clock) * 1000)
    again = sent.retryable and delivery.attempts < settings.ALERT_DELIVERY_MAX_ATTEMPTS
    with transaction.atomic():
        if sent.ok:
            outcome, fields = AlertAttempt.Outcome.DELIVERED, {"status": AlertDelivery.Status.DELIVERED,
                                                               "delivered_at": timezone.now()}  # fmt: skip
        elif again:
            # The task retries (feedback/tasks.py); beat's resend only once this is overdue.
            due = timezone.now() + timedelta(seconds=retry_due(delivery.attempts))
            outcome, fields = AlertAttempt.Outcome.RETRY, {"next_attempt_at": due}
        else:
            outcome, fields = AlertAttempt.Outcome.FAILED, {"status": AlertDelivery.Status.FAILED}
        AlertDelivery.objects.filter(pk=delivery.pk).update(**fields)
        if not sent.ok:
            logger.warning("alert delivery %s attempt %s: %s", delivery.pk, delivery.attempts, sent.error)
        return AlertAttempt.objects.create(
            delivery=delivery, number=delivery.attempts, started_at=started, duration_ms=duration_ms,
            status_code=sent.status_code, outcome=outcome, error=sent.error[:2000],
        )  # fmt: skip


def alert_deliveries_resend() -> list[int]:
    """Queue again the notifications whose attempt is overdue: their message was lost (a broker
    down when it was queued, a worker killed mid-attempt). Moving ``next_attempt_at`` first means
    each is queued once per RESEND_AFTER however many beats look."""
    now = timezone.now()  # the workers' clock, which claims compare with
    overdue = AlertDelivery.objects.filter(status=AlertDelivery.Status.PENDING, next_attempt_at__lt=now - RESEND_AFTER)
    # Its last attempt was cut short (a worker killed during it): no attempt is left to make.
    overdue.filter(attempts__gte=settings.ALERT_DELIVERY_MAX_ATTEMPTS).update(status=AlertDelivery.Status.FAILED)
    resent = []
    for delivery_id, due in overdue.values_list("pk", "next_attempt_at")[:500]:
        with transaction.atomic():
            if AlertDelivery.objects.filter(pk=delivery_id, next_attempt_at=due).update(next_attempt_at=now):
                queue.alert_deliver(delivery_id)
                resent.append(delivery_id)
    return resent


def redacted(url: str) -> str:
    """A webhook URL as pages show it: its scheme and host (the path of many webhook services, Slack's
    and Teams', is itself the secret)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}/…"
