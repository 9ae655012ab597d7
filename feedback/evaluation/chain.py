"""The evaluator chain: one round of evaluations per call, the run's composite score and its
outcome.

The composite rule, written down once (``composite_score``):

1. If a person has scored the run, the run's score is the **latest human score**: people
   outrank every automatic evaluator, and a later human score replaces an earlier one.
2. Otherwise it is the weighted mean of the **latest automatic round's successful** scores,
   with the weights the profile gave when that round ran. Failed evaluators are left out (the
   others' weights are renormalised), so one broken judge does not zero a run.
3. No successful score at all: no score (``None``), never a made-up number.

The outcome rule, written down once (``run_outcome``). A run's status says how the process
ended ("succeeded": with a final answer); its outcome says whether the task was accomplished.
Each evaluation may give a verdict (``Evaluation.accomplished``: yes, no, or none); a failed
evaluation gives none. The outcome is the first of:

1. **A person's verdict**: the latest human evaluation that says accomplished or not. People
   outrank every automatic evaluator, as for the score.
2. **Not accomplished** if the run ended without an answer (failed or cancelled).
3. **The reference's verdict**, when the task has an expected answer (latest automatic round):
   the answer matches it fully or it does not. A known right answer outweighs any heuristic.
4. **Not accomplished** on any hard evidence in the latest round: the rule evaluator found that
   the answer gives up (a refusal, "I could not find…", "I don't know"), or the judge says no.
5. **The judge's verdict** (an LLM's ``accomplished``, or the offline heuristic judge's).
6. **Unknown**: nothing to decide from (not evaluated yet, the judge failed and there is no
   reference). Unknown is never counted as accomplished.
"""

import logging
from collections.abc import Callable

from django.db import transaction
from django.db.models import Max

from feedback import costs, queue
from feedback.models import Evaluation, Run
from feedback.rollups import rollup_add, rollup_change

from .evaluators import EVALUATOR_KINDS, EvaluatorError, Verdict, rule_evaluator
from .judge import judge_evaluator, judge_name
from .profiles import profile_for
from .reference import reference_evaluator

logger = logging.getLogger(__name__)

EVALUATORS: dict[str, Callable[[Run, dict], Verdict | None]] = {
    "rule": rule_evaluator,
    "reference": reference_evaluator,
    "judge": judge_evaluator,
}


def composite_score(run: Run) -> float | None:
    """The run's score from its evaluations, by the rule in this module's docstring."""
    evaluations = Evaluation.objects.filter(run=run, status=Evaluation.Status.OK, score__isnull=False)
    human = evaluations.filter(kind=Evaluation.Kind.HUMAN).order_by("-created_at", "-id").first()
    if human is not None:
        return human.score
    automatic = evaluations.exclude(kind=Evaluation.Kind.HUMAN)
    latest = automatic.aggregate(r=Max("round"))["r"]
    if latest is None:
        return None
    rows = list(automatic.filter(round=latest).values_list("score", "weight"))
    total_weight = sum(w for _, w in rows)
    if total_weight <= 0:
        return None
    return round(sum(s * w for s, w in rows) / total_weight, 4)


def run_outcome(run: Run) -> str:
    """The run's outcome from its status and evaluations, by the rule in this module's docstring."""
    verdicts = Evaluation.objects.filter(run=run, status=Evaluation.Status.OK)
    human = verdicts.filter(kind=Evaluation.Kind.HUMAN, accomplished__isnull=False).order_by("-created_at", "-id")
    person = human.values_list("accomplished", flat=True).first()
    if person is not None:
        return _outcome(person)
    if run.status in (Run.Status.FAILED, Run.Status.CANCELLED):
        return Run.Outcome.NOT_ACCOMPLISHED
    automatic = verdicts.exclude(kind=Evaluation.Kind.HUMAN)
    latest = automatic.aggregate(r=Max("round"))["r"]
    said = list(automatic.filter(round=latest, accomplished__isnull=False).values_list("kind", "accomplished"))
    reference = [yes for kind, yes in said if kind == Evaluation.Kind.REFERENCE]
    if reference:
        return _outcome(all(reference))
    if any(yes is False for _, yes in said):
        return Run.Outcome.NOT_ACCOMPLISHED
    if any(yes for _, yes in said):
        return Run.Outcome.ACCOMPLISHED
    return Run.Outcome.UNKNOWN


def _outcome(accomplished: bool) -> str:
    return Run.Outcome.ACCOMPLISHED if accomplished else Run.Outcome.NOT_ACCOMPLISHED


def _automatic_rounds(run_id: int):
    return Evaluation.objects.filter(run_id=run_id).exclude(kind=Evaluation.Kind.HUMAN)


def _failed(row: dict, message: str, details: dict) -> dict:
    details = {"error": message, **details}
    return {**row, "status": Evaluation.Status.FAILED, "feedback": message, "details": details}


def _judge(run: Run) -> list[dict]:
    """Every evaluator of the run's profile, each isolated from the others' failures."""
    results = []
    for entry in profile_for(run.task_kind).evaluators:
        name = entry.get("evaluator")
        evaluate = EVALUATORS.get(name)
        row = {
            "evaluator": judge_name() if name == "judge" else str(name),
            "kind": EVALUATOR_KINDS.get(name, Evaluation.Kind.RULE),
            "weight": float(entry.get("weight", 1.0)),
        }
        try:
            if evaluate is None:
                raise EvaluatorError(f"Unknown evaluator {name!r} in the {run.task_kind} profile.")
            verdict = evaluate(run, entry.get("config") or {})
        except EvaluatorError as exc:
            results.append(_failed(row, str(exc), exc.details))
            continue
        except Exception as exc:
            # A bug in one evaluator must not cost the run its other scores.
            logger.exception("evaluator %s failed on run %s", name, run.pk)
            results.append(_failed(row, f"{type(exc).__name__}: {exc}", {}))
            continue
        if verdict is None:
            continue  # not applicable (e.g. no expected answer): no row, no weight
        results.append(
            {
                **row,
                "status": Evaluation.Status.OK,
                "score": min(1.0, max(0.0, float(verdict.score))),
                "feedback": verdict.feedback,
                "details": verdict.details,
                "accomplished": verdict.accomplished,
                "cost": _judge_cost(verdict.details),
            }
        )
    return results


def _judge_cost(details: dict) -> float | None:
    """What an LLM judge's call cost, from the model and tokens it reports (None: no model call,
    or a model without a price)."""
    if not details.get("model") or "tokens_in" not in details:
        return None
    price = costs.price_for(backend="openai", model_name=details["model"])
    return None if price is None else price.of(details.get("tokens_in", 0), details.get("tokens_out", 0))


def evaluate_run(run_id: int, *, expected_round: int | None = None) -> list[Evaluation]:
    """Score a finished run with its profile's evaluators as a new round, then its composite
    score and its outcome.

    Idempotent, so a redelivered task does no double work: without ``expected_round`` it only
    evaluates a run that has no automatic round yet (the evaluation when the run ends); with it,
    it only writes that round if nobody wrote it first (a reviewer's re-evaluation).
    """
    run = Run.objects.select_related("task").filter(pk=run_id).first()
    if run is None or run.is_active:
        return []
    existing = _automatic_rounds(run_id).aggregate(r=Max("round"))["r"] or 0
    if (expected_round is None and existing) or (expected_round is not None and existing >= expected_round):
        return []
    # The evaluators (a judge may take a minute) run outside the transaction; only the writes
    # hold the row lock.
    results = _judge(run)
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        latest = Evaluation.objects.filter(run=run).aggregate(r=Max("round"))["r"] or 0
        round_number = expected_round or latest + 1
        already = _automatic_rounds(run_id)
        if expected_round is not None:
            already = already.filter(round__gte=round_number)
        if already.exists():
            return []  # another worker wrote this round while the evaluators ran
        # A re-evaluated run's new score and outcome change its day's rollups; a run evaluated
        # for the first time is counted in them now, with its score and outcome, committed with
        # them so no reader sees one without the other.
        with rollup_change(run_id=run_id):
            rows = Evaluation.objects.bulk_create(Evaluation(run=run, round=round_number, **r) for r in results)
            run.score = composite_score(run)
            run.outcome = run_outcome(run)
            run.save(update_fields=["score", "outcome"])
        rollup_add(run_id=run_id)
        # Its trace, with these scores, once they are committed (OTEL_EXPORT_RUNS).
        queue.run_export(run_id)
    return rows
