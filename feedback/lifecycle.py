"""The one owner of a run's lifecycle: how a run ends (``run_end``) and what follows a change of
its score or outcome (``run_scored``). Nothing else writes a run's end or its score.

Every way a run ends goes through ``run_end``:

- the loop (feedback/agent/loop.py), under its worker's lease and with its last step: an answer;
  a failure (a step or time limit, a model that cannot be reached or replies unusably, a
  reflection that gives up); a cancel it reads at the start of a turn;
- a crash of the loop (execute_run), under the same lease;
- a cancel of a queued run, or of one awaiting a confirmation, from a page or the API
  (services.run_cancel); a running run's cancel is only asked for (``Run.cancel_requested``), and
  its loop reads that flag at the start of every turn (``cancel_requested`` below: a plain read)
  and ends the run;
- a worker finding a queued run whose cancel was asked (execute_run's failed claim: cancelled
  while its message waited, or re-queued by the reaper after its worker died while the cancel
  was pending).
The reaper never ends a run: it puts one whose worker vanished back in the queue
(agent/checkpoint.py), and the next worker resumes it, or ends it as above.

An end is a conditional UPDATE (only the first end of a run counts; a second finds no row and
changes nothing). Once it is written (in the same transaction; a worker's, right after the
transaction of its last step), the run's pending confirmations are withdrawn (status
"withdrawn", when and why: nobody can approve a call of a run that has ended) and its evaluation
is queued for when that commits (a lost message is sent again by the reaper). A worker that ends
the run it holds first ends the run's MCP sessions, so no server process outlives a run shown as
ended. The run's trace is exported after its first evaluation (``run_scored``). A cancel asked
while a worker asks for a confirmation wins: the run never waits, its next turn ends it.

**The evaluation rule**, written down once: *every* run that ended is evaluated, however it
ended, so a failure weighs as a failure in the averages, the trials and mining (a run left
unscored would drop out of them). A run that ended without an answer (failed or cancelled) is
not sent to the judge, an LLM's or the offline heuristic standing in for it: there is no answer
to judge, and a model call would only cost. The rule and reference evaluators still score it (an
absent answer fails their checks), and its outcome is *not accomplished* by the outcome rule
(feedback/evaluation/chain.py, rule 2), written with its end: only a person's verdict changes it.

Every change of a run's score or outcome goes through ``run_scored``: a round of the evaluation
chain (the first one when the run ended, a reviewer's re-evaluation later) and a reviewer's score.
It writes both from the run's evaluations by the chain's rules and queues what follows: the run's
trace with its first automatic round, any later evaluation as spans of their own
(feedback/otel_export/). Metric tables are not written here: feedback/metrics counts ended runs
from their rows.
"""

import logging
from collections.abc import Callable, Sequence

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from feedback import queue
from feedback.agent.lease import LeaseLost
from feedback.agent.recorder import retrying, storable
from feedback.agent.tools.mcp import release_run
from feedback.evaluation import chain
from feedback.evaluation.profiles import profile_for
from feedback.models import Evaluation, Run, ToolConfirmation

logger = logging.getLogger(__name__)

# What a cancel from a page or the API can end at once: a run no worker holds.
UNHELD = Q(status__in=[Run.Status.QUEUED, Run.Status.AWAITING_CONFIRMATION])
CANCELLED_BY_A_USER = "Cancelled by a user."


def cancel_requested(*, run_id: int) -> bool:
    """Whether a person asked to stop the run: the loop reads it at the start of every turn."""
    return retrying(
        lambda: Run.objects.filter(pk=run_id).values_list("cancel_requested", flat=True).get(),
        what="reading the cancel flag",
    )


def run_pause(*, run_id: int, lease: str) -> bool:
    """The worker holding the run lets go of it to wait for a person (its confirmations are
    asked): its MCP sessions end, then it waits, unless a cancel was asked first. The cancel's
    UPDATE and this one take the run's row one after the other, so a cancelled run never waits.
    False when a cancel came first; LeaseLost when the run is no longer this worker's."""
    release_run(run_id)  # before its status says it waits: no server process waits with it
    held = Run.objects.filter(pk=run_id, worker=lease, status=Run.Status.RUNNING)
    paused = Run.objects.filter(pk=run_id, status=Run.Status.AWAITING_CONFIRMATION, worker="")

    def pause() -> bool:
        changes = {"status": Run.Status.AWAITING_CONFIRMATION, "worker": "", "heartbeat_at": timezone.now()}
        if held.filter(cancel_requested=False).update(**changes):
            return True
        if not held.exists():
            raise LeaseLost(f"run {run_id} is no longer leased to {lease}")
        return False

    # recover: the pause committed, though its acknowledgement was lost.
    return retrying(pause, what="pausing the run", recover=lambda: paused.exists() or None)


def run_end(
    *,
    run_id: int,
    status: str,
    error: str = "",
    output: str = "",
    when: Q = UNHELD,
    lease: str = "",
    write: Callable[[dict], object] | None = None,
    fields: dict | None = None,
    by: AbstractBaseUser | None = None,
) -> bool:
    """End the run as ``status`` (succeeded, failed or cancelled), if it may still end so, with
    the after-effects in the module's docstring. Returns whether this call ended it.

    ``when``: what the run must be for this end to apply (a queued or waiting run by default).
    ``lease``: the ending worker's, which holds the run: its MCP sessions end first, and the end is
    written only while the run is running under that lease. ``write``: that worker's own write of
    the end fields, with its last step (it raises LeaseLost when the run is no longer its own).
    ``fields``: more of the run's row written with its end (its plan, its sandbox's size).
    ``by``: the person who ended it (a cancel), named on the withdrawn confirmations."""
    ends = {"status": status, "final_output": output, "error": error, "finished_at": timezone.now(), **(fields or {})}
    if status != Run.Status.SUCCEEDED:
        ends["outcome"] = Run.Outcome.NOT_ACCOMPLISHED  # ended without an answer: the outcome rule's 2
    if lease:
        release_run(run_id)
        when = Q(worker=lease, status=Run.Status.RUNNING)
    if write is not None:
        write(ends)
        # One statement, atomic by itself: no transaction of its own on the loop's path.
        ended = retrying(lambda: _after_end(run_id, status, by), what="withdrawing the run's confirmations")
    else:
        stored = {**ends, "final_output": storable(output), "error": storable(error)}
        ended = retrying(lambda: _end(run_id, when, stored, by), what="ending the run")
    if ended:
        # The run id in the message itself: Celery's worker log format drops the context filter.
        logger.info("run %s finished: %s %s", run_id, status, error)
    return ended


@transaction.atomic
def _end(run_id: int, when: Q, ends: dict, by: AbstractBaseUser | None) -> bool:
    if not Run.objects.filter(Q(pk=run_id) & when).update(**ends):
        return False
    return _after_end(run_id, ends["status"], by)


def _after_end(run_id: int, status: str, by: AbstractBaseUser | None) -> bool:
    why = "The run was cancelled." if status == Run.Status.CANCELLED else f"The run ended ({status})."
    ToolConfirmation.objects.filter(run_id=run_id, status=ToolConfirmation.Status.PENDING).update(
        status=ToolConfirmation.Status.WITHDRAWN, decided_at=timezone.now(), decided_by=by, reason=why
    )
    queue.run_evaluate(run_id)  # every ended run: the evaluation rule above
    return True


def evaluators_for(run: Run, evaluators: list[dict] | None = None) -> list[dict]:
    """The evaluators of the run's profile (``evaluators``: its list, when the caller read it)
    that evaluate it, by the evaluation rule: a run without an answer is not sent to the judge."""
    evaluators = profile_for(run.task_kind).evaluators if evaluators is None else evaluators
    if run.status == Run.Status.SUCCEEDED:
        return evaluators
    return [entry for entry in evaluators if entry.get("evaluator") != "judge"]


def run_scored(*, run: Run, evaluations: Sequence[Evaluation], rows: list[dict] | None = None) -> None:
    """``evaluations`` were just written for ``run`` (an automatic round, or a reviewer's score),
    in the caller's transaction, under the run's row lock: its score and outcome from all of its
    evaluations (``rows``: those as the chain's rules read them, when the caller has them), then
    what follows, once committed."""
    run.score = chain.composite_score(run, rows)
    run.outcome = chain.run_outcome(run, rows)
    run.save(update_fields=["score", "outcome"])
    new = [evaluation.pk for evaluation in evaluations]
    if run.purpose == Run.Purpose.EXPERIMENT:
        # Its pair may be complete: the experiment looks at its test again (experiments/services.py).
        from feedback.experiments.services import experiment_of_run

        experiment_id = experiment_of_run(run)
        if experiment_id is not None:
            queue.experiment_advance(experiment_id)
    if _first_round(run, evaluations, rows):
        queue.run_export(run.pk)  # the run's trace, its first round on the run's span
    else:
        # The run's spans are never sent again (receivers keep the first copy): spans of their own.
        queue.evaluations_export(new)


def _first_round(run: Run, evaluations: Sequence[Evaluation], rows: list[dict] | None) -> bool:
    if any(evaluation.kind == Evaluation.Kind.HUMAN for evaluation in evaluations):
        return False
    new = {evaluation.pk for evaluation in evaluations}
    if rows is not None:
        return not any(r["kind"] != Evaluation.Kind.HUMAN and r["id"] not in new for r in rows)
    return not run.evaluations.exclude(kind=Evaluation.Kind.HUMAN).exclude(pk__in=new).exists()
