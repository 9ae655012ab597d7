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
evaluation gives none. *Accomplished* needs evidence: a person, a reference or a dataset's
checker (something that knows the right answer), or an LLM judge the operator configured. The
offline heuristic judge reads no answer's meaning: its "yes" is a hint shown beside the score,
never an outcome. The outcome is the first of:

1. **A person's verdict**: the latest human evaluation that says accomplished or not. People
   outrank every automatic evaluator, as for the score.
2. **Not accomplished** if the run ended without an answer (failed or cancelled).
3. **The checker's verdict**, when the run answers a dataset item with a checker
   (feedback.datasets.checkers, when that package is installed).
4. **The reference's verdict**, when the task has an expected answer (latest automatic round):
   the answer matches it fully or it does not. A known right answer outweighs any heuristic.
5. **Not accomplished** on any hard evidence in the latest round: the rule evaluator found that
   the answer gives up (a refusal, "I could not find…", "I don't know"), or a judge says no.
6. **An LLM judge's verdict** (``llm_judge:<model>``; the offline heuristic judge's "yes" does
   not count).
7. **Unknown**: nothing to decide from (not evaluated yet, only the heuristic judge, the judge
   failed and there is no reference). Unknown is never counted as accomplished.

And whatever rules 3 to 6 say, a run that called tools and saw every call fail is **not
accomplished**: its answer rests on nothing a tool returned (only a person outranks this).
"""

import logging
from collections.abc import Callable

from django.db import transaction
from django.db.models import OuterRef, Subquery

from feedback import costs, lifecycle
from feedback.models import Evaluation, EvaluationProfile, Run

from . import evidence
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


# What the composite and outcome rules read of a run's evaluations: one query gives both.
_VERDICT_FIELDS = ("kind", "evaluator", "round", "status", "score", "weight", "accomplished", "created_at", "id")


def _verdict_rows(run_id: int) -> list[dict]:
    return verdict_rows([run_id]).get(run_id, [])


def verdict_rows(run_ids: list[int]) -> dict[int, list[dict]]:
    """Each run's evaluation rows as ``run_outcome`` reads them, for many runs in one query."""
    rows: dict[int, list[dict]] = {}
    for row in Evaluation.objects.filter(run_id__in=run_ids).order_by("id").values("run_id", *_VERDICT_FIELDS):
        rows.setdefault(row.pop("run_id"), []).append(row)
    return rows


def _latest_human(rows: list[dict]) -> dict | None:
    human = (r for r in rows if r["kind"] == Evaluation.Kind.HUMAN)
    return max(human, key=lambda r: (r["created_at"], r["id"]), default=None)


def _latest_round(rows: list[dict]) -> list[dict]:
    """The rows of the latest automatic round among ``rows``."""
    automatic = [r for r in rows if r["kind"] != Evaluation.Kind.HUMAN]
    latest = max((r["round"] for r in automatic), default=None)
    return [r for r in automatic if r["round"] == latest]


def composite_score(run: Run, rows: list[dict] | None = None) -> float | None:
    """The run's score from its evaluations, by the rule in this module's docstring. ``rows``:
    its evaluations as ``_verdict_rows`` reads them, when the caller has them."""
    rows = _verdict_rows(run.pk) if rows is None else rows
    scored = [r for r in rows if r["status"] == Evaluation.Status.OK and r["score"] is not None]
    human = _latest_human(scored)
    if human is not None:
        return human["score"]
    latest = _latest_round(scored)
    total_weight = sum(r["weight"] for r in latest)
    if total_weight <= 0:
        return None
    return round(sum(r["score"] * r["weight"] for r in latest) / total_weight, 4)


def run_outcome(run: Run, rows: list[dict] | None = None, *, use_checker: bool = True) -> str:
    """The run's outcome from its status and evaluations, by the rule in this module's docstring.
    ``rows``: as for ``composite_score``; ``use_checker=False``: what it would be without a
    dataset checker (the outcome's precision is measured against the checker, metrics.precision)."""
    rows = _verdict_rows(run.pk) if rows is None else rows
    verdicts = [r for r in rows if r["status"] == Evaluation.Status.OK]
    person = _latest_human([r for r in verdicts if r["accomplished"] is not None])
    if person is not None:
        return _outcome(person["accomplished"])
    if run.status in (Run.Status.FAILED, Run.Status.CANCELLED):
        return Run.Outcome.NOT_ACCOMPLISHED
    outcome = _automatic_outcome(run, verdicts, use_checker=use_checker)
    # Counted only for a run about to be called accomplished: the others cost no query.
    if outcome == Run.Outcome.ACCOMPLISHED and evidence.every_tool_call_failed(run.pk):
        return Run.Outcome.NOT_ACCOMPLISHED
    return outcome


def _automatic_outcome(run: Run, verdicts: list[dict], *, use_checker: bool) -> str:
    """Rules 3 to 7: the checker, the reference, hard evidence against, an LLM judge, unknown."""
    checked = evidence.checker_passed(run) if use_checker else None
    if checked is not None:
        return _outcome(checked)
    said = [(r, r["accomplished"]) for r in _latest_round(verdicts) if r["accomplished"] is not None]
    reference = [yes for r, yes in said if r["kind"] == Evaluation.Kind.REFERENCE]
    if reference:
        return _outcome(all(reference))
    if any(yes is False for _, yes in said):
        return Run.Outcome.NOT_ACCOMPLISHED
    if any(yes and evidence.is_evidence(r) for r, yes in said):
        return Run.Outcome.ACCOMPLISHED
    return Run.Outcome.UNKNOWN


def _outcome(accomplished: bool) -> str:
    return Run.Outcome.ACCOMPLISHED if accomplished else Run.Outcome.NOT_ACCOMPLISHED


def _automatic_rounds(run_id: int):
    return Evaluation.objects.filter(run_id=run_id).exclude(kind=Evaluation.Kind.HUMAN)


def _failed(row: dict, message: str, details: dict) -> dict:
    details = {"error": message, **details}
    return {**row, "status": Evaluation.Status.FAILED, "feedback": message, "details": details}


def _judge(run: Run, evaluators: list[dict] | None = None) -> list[dict]:
    """Every evaluator of the run's profile (``evaluators``: its list, when the caller read it),
    each isolated from the others' failures."""
    results = []
    for entry in profile_for(run.task_kind).evaluators if evaluators is None else evaluators:
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
    # With the run, in one query: its latest automatic round and its kind's profile (made from
    # the defaults by profile_for when the kind has none yet).
    latest_automatic = _automatic_rounds(run_id).filter(run=OuterRef("pk")).order_by("-round").values("round")[:1]
    profile = EvaluationProfile.objects.filter(task_kind=OuterRef("task_kind")).values("evaluators")[:1]
    run = (
        Run.objects.select_related("task")
        .annotate(evaluated=Subquery(latest_automatic), profile_evaluators=Subquery(profile))
        .filter(pk=run_id)
        .first()
    )
    if run is None or run.is_active:
        return []
    existing = run.evaluated or 0
    if (expected_round is None and existing) or (expected_round is not None and existing >= expected_round):
        return []
    # The evaluators (a judge may take a minute) run outside the transaction; only the writes
    # hold the row lock.
    results = _judge(run, lifecycle.evaluators_for(run, run.profile_evaluators))
    with transaction.atomic():
        # Under the run's lock, its evaluations so far: whether another worker wrote this round
        # while the evaluators ran, and with the new round, the run's score and outcome.
        run.status = Run.objects.select_for_update().values_list("status", flat=True).get(pk=run_id)
        before = _verdict_rows(run_id)
        round_number = expected_round or max((r["round"] for r in before), default=0) + 1
        automatic = [r["round"] for r in before if r["kind"] != Evaluation.Kind.HUMAN]
        if any(expected_round is None or number >= round_number for number in automatic):
            return []  # another worker wrote this round while the evaluators ran
        rows = Evaluation.objects.bulk_create(Evaluation(run=run, round=round_number, **r) for r in results)
        verdicts = before + [{name: getattr(row, name) for name in _VERDICT_FIELDS} for row in rows]
        # The run's score and outcome, and what follows them (the export), committed with the round.
        lifecycle.run_scored(run=run, evaluations=rows, rows=verdicts)
    return rows
