"""Alerts: rules beat checks every minute, incidents opened and resolved once, and their notifications.

Every enabled rule is evaluated into *findings*, one per subject it watches (all runs or one task
kind; a strategy on trial's harm and its split; queued, running and awaiting runs), each with its
figures and whether the condition holds: yes, no, or cannot be judged yet (fewer runs than the
rule's minimum). Then, per subject:

- it holds and no incident is open: an incident opens, and its "open" notifications are queued
  (one per webhook URL and email address of the rule), in the same transaction;
- it holds and an incident is open: the incident stays open (``checked_at`` moves), nothing is sent;
- it does not hold (or the subject is gone: the strategy left its trial, the rule's scope changed)
  and an incident is open: the incident resolves, and its "resolve" notifications are queued;
- it cannot be judged: nothing changes, either way.

**No duplicates for one incident**, also when two beats or a redelivered task evaluate at the same
moment: opening is an INSERT that a partial unique constraint (one open incident per rule and
subject) lets through once; resolving is a conditional UPDATE from "open" that one evaluation wins.
Only the winner queues notifications, each a row unique per incident, event, channel and target.

Each notification is sent by its own task (a failing channel holds up no other), one
``AlertAttempt`` row per try, retried by Celery's autoretry (feedback/tasks.py). A worker claims an
attempt by a conditional UPDATE that moves ``next_attempt_at`` past its timeout, so a duplicate
message finds the delivery taken. Webhooks
are retried on a 5xx, a timeout or an unreachable receiver, never on a 4xx or a redirect; mail on
an unreachable server or a 4xx reply.
"""

from feedback.alerts.delivery import alert_deliver, redacted
from feedback.alerts.incidents import alerts_evaluate
from feedback.alerts.messages import dashboard_path, rule_condition, subject_label, summary

__all__ = [
    "alert_deliver",
    "alerts_evaluate",
    "dashboard_path",
    "redacted",
    "rule_condition",
    "subject_label",
    "summary",
]
