"""Rows as the API gives them (the shapes of schemas.py), from what the selectors read. A run is
the trace download's header (traces.run_as_dict) plus what a client needs beside it."""

import base64
import binascii
import json

from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone
from django.utils.translation import gettext as _

from feedback import selectors, traces
from feedback.models import Evaluation, Run, Strategy, Workspace
from feedback.strategies.trials import trial_stats

from .errors import invalid

# How many of the runs a strategy was mined from its page lists.
EVIDENCE_SHOWN = 50


def _name(user: AbstractBaseUser | None) -> str | None:
    return user.get_username() if user is not None else None


def run_summary(run: Run) -> dict:
    """``run`` with its task (and the task's author) loaded."""
    return {
        "id": run.pk,
        "task": {"id": run.task_id, "kind": run.task_kind, "text": run.task.text},
        "status": run.status,
        "outcome": run.outcome,
        "score": run.score,
        "created_by": _name(run.task.created_by),
        "created_at": run.created_at,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "step_count": run.step_count,
        "tokens_in": run.tokens_in,
        "tokens_out": run.tokens_out,
        "cost": run.cost,
        "parent_id": run.parent_id,
        "retry_of_id": run.retry_of_id,
        "cancel_requested": run.cancel_requested,
    }


def evaluation(row: Evaluation) -> dict:
    return {
        "id": row.pk,
        "round": row.round,
        "evaluator": row.evaluator,
        "kind": row.kind,
        "status": row.status,
        "score": row.score,
        "weight": row.weight,
        "cost": row.cost,
        "accomplished": row.accomplished,
        "feedback": row.feedback,
        "details": row.details or {},
        "corrected_answer": row.corrected_answer,
        "author": _name(row.author),
        "created_at": row.created_at,
    }


def run_detail(run: Run) -> dict:
    """``run`` with its task, the task's author and workspace loaded."""
    task = run.task
    working = waited = None
    if run.started_at is not None:
        end = run.finished_at or timezone.now()
        waits = traces.run_waits(run.pk)
        working, waited = traces.working_and_waited_seconds(started_at=run.started_at, end=end, waits=waits)
    return {
        **traces.run_as_dict(run),
        **run_summary(run),
        "task": {
            "id": task.pk,
            "kind": task.kind,
            "text": task.text,
            "expected_answer": task.expected_answer,
            "workspace": task.workspace.name if task.workspace else None,
            "created_by": _name(task.created_by),
            "created_at": task.created_at,
        },
        "working_seconds": working,
        "waited_seconds": waited,
        "evaluations": [evaluation(row) for row in selectors.run_evaluations(run)],
    }


def workspace(row: Workspace) -> dict:
    return {"id": row.pk, "name": row.name, "description": row.description, "owner": _name(row.owner),
            "created_at": row.created_at}  # fmt: skip


def disk(figures: dict) -> dict:
    """selectors.disk_figures, flat: sizes in bytes."""
    workspaces, sandboxes, oldest = figures["workspaces"], figures["sandboxes"], figures["sandboxes"]["oldest"]
    return {
        "workspaces_bytes": workspaces["bytes"],
        "workspaces": workspaces["count"],
        "upload_workspaces": workspaces["uploads"],
        "unmeasured_workspaces": workspaces["unmeasured"],
        "sandboxes_bytes": sandboxes["bytes"],
        "sandboxes_kept": sandboxes["count"],
        "sandboxes_of_active_runs": sandboxes["active"],
        "oldest_sandbox_run_id": oldest["pk"] if oldest else None,
        "oldest_sandbox_ended_at": oldest["finished_at"] if oldest else None,
        "retention_days": figures["retention_days"],
        "next_cleanup_at": figures["next_cleanup"],
        "quota_bytes": figures["quota_bytes"],
        "nearest_quota": figures["nearest"],
    }


def strategy_summary(strategy: Strategy) -> dict:
    """``strategy`` with its current version loaded."""
    version = strategy.current_version
    return {
        "id": strategy.pk,
        "title": strategy.title,
        "status": strategy.status,
        "pattern_kind": strategy.pattern_kind,
        "support": strategy.support,
        "confidence": strategy.confidence,
        "trial_fraction": strategy.trial_fraction,
        "trial_started_at": strategy.trial_started_at,
        "created_at": strategy.created_at,
        "updated_at": strategy.updated_at,
        "version": version.number if version else None,
    }


def strategy_detail(strategy: Strategy) -> dict:
    """What the strategy's review page shows: every version, the audit log, the trial."""
    versions = strategy.versions.select_related("author").order_by("-number")
    events = strategy.events.select_related("actor", "version").order_by("-created_at", "-id")
    evidence = strategy.evidence.order_by("-pk").values_list("pk", flat=True)[:EVIDENCE_SHOWN]
    return {
        **strategy_summary(strategy),
        "evidence_summary": strategy.evidence_summary or {},
        "evidence_run_ids": list(evidence),
        "versions": [
            {**v.snapshot(), "number": v.number, "author": _name(v.author), "created_at": v.created_at}
            for v in versions
        ],
        "events": [
            {
                "id": e.pk,
                "action": e.action,
                "from_status": e.from_status,
                "to_status": e.to_status,
                "version": e.version.number if e.version else None,
                "actor": _name(e.actor),
                "reason": e.reason,
                "created_at": e.created_at,
            }
            for e in events
        ],
        "trial": trial_stats(strategy).as_json() if strategy.trial_started_at else None,
    }


# --- opaque cursors ---------------------------------------------------------------------------------
# A cursor is the list's own keyset position, wrapped with the order it belongs to: clients pass it
# back as it is, and a cursor of another order (or a mangled one) is refused, not misread.
def encode_cursor(order: str, direction: str, position: str) -> str:
    raw = json.dumps([order, direction, position], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, *, order: str) -> tuple[str, str]:
    """(direction, position) of ``cursor``, made for the list in ``order``; 400 otherwise."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        made_for, direction, position = json.loads(raw)
        valid = direction in ("after", "before") and isinstance(position, str) and isinstance(made_for, str)
    except (binascii.Error, ValueError, TypeError):
        valid = False
    if not valid:
        raise invalid({"cursor": [_("Not a cursor of this list: pass next_cursor or previous_cursor as given.")]})
    if made_for != order:
        raise invalid({"cursor": [_("This cursor belongs to the list sorted by %(order)s.") % {"order": made_for}]})
    return direction, position
