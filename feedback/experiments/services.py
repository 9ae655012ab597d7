"""State changes of paired experiments: start, advance (the worker's), stop.

An experiment runs its pairs a few at a time (EXPERIMENT_PAIRS_IN_FLIGHT): each pair is one
dataset item run twice, with and without the change, as experiment runs (``Run.purpose``), which
production metrics, mining and trials never read. After every pair that completes,
``experiment_advance`` looks at the paired sequential test (paired.py, valid at every look): a
decision ends the experiment, with the verdict and the figures frozen; otherwise it starts the
next pairs, until the items run out ("undecided"). Runs waiting for a worker yield to production
runs (``yields_to_production``): experiments take the capacity production leaves.

A strategy's experiment moves it proposed -> experiment; its verdict is the reviewer's to act on
(approve for trial, reject), never acted on by itself. Stopping the experiment returns it to
proposed.
"""

import random
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _

from feedback import lifecycle, queue
from feedback.agent.guardrails import check_guardrails
from feedback.datasets.checkers import checker_verdict
from feedback.datasets.services import dataset_item_workspace, item_can_use
from feedback.models import DatasetVersion, Experiment, ExperimentPair, Run, Strategy, StrategyEvent, Task
from feedback.storable import unstorable
from feedback.strategies.services import strategy_event_record

from .figures import arm_figures
from .paired import paired_verdict

MAX_PAIRS = 2000


def _require(user: AbstractBaseUser, change_kind: str) -> None:
    if not user.has_perm("feedback.add_experiment"):
        raise PermissionDenied
    if change_kind == Experiment.Change.STRATEGY and not user.has_perm("feedback.decide_strategy"):
        raise PermissionDenied(_("Sending a strategy to an experiment is a reviewer's decision."))


def _check_change(change_kind: str, change: dict) -> dict:
    """The change of a kind other than a strategy, checked and reduced to its one key."""
    if change_kind == Experiment.Change.GUIDANCE:
        guidance = str(change.get("guidance") or "").strip()
        if not guidance:
            raise ValidationError(_("Write the guidance the treatment arm gets."))
        problems = unstorable(guidance, name="guidance")
        if problems:
            raise ValidationError(problems)
        return {"guidance": guidance}
    if change_kind == Experiment.Change.GUARDRAILS:
        rules = change.get("guardrails")
        problems = check_guardrails(rules) if isinstance(rules, list) and rules else [_("Give at least one guardrail.")]
        if problems:
            raise ValidationError(problems)
        return {"guardrails": rules}
    if change_kind == Experiment.Change.MODEL:
        from feedback.agent.llm.client import use_endpoint

        name = str(change.get("model") or "").strip()
        if not name:
            raise ValidationError(_("Name the model the treatment arm uses."))
        if not use_endpoint():
            raise ValidationError(
                _("The offline demo model is the only model here: configure an endpoint to compare models.")
            )
        if name == settings.LLM_MODEL:
            raise ValidationError(_("That is the model both arms use already."))
        return {"model": name[:200]}
    raise ValidationError(_("Unknown kind of change: %(kind)s.") % {"kind": change_kind})


@transaction.atomic
def experiment_start(
    *,
    user: AbstractBaseUser,
    dataset_version: DatasetVersion,
    change_kind: str,
    strategy: Strategy | None = None,
    change: dict | None = None,
    split: str = "",
    repeats: int = 1,
    seed: int | None = None,
    limit: int | None = None,
) -> Experiment:
    """Start running ``dataset_version``'s items (``split``'s only, when given; the first ``limit``
    of them by position, when given: a quick experiment) ``repeats`` times each, with and without
    the change. Items a person may not use (another's private upload) are left out; none left is
    an error, as is a strategy that is not a proposal."""
    _require(user, change_kind)
    if not 1 <= repeats <= 5:
        raise ValidationError(_("Repeats must be between 1 and 5."))
    if limit is not None and limit < 1:
        raise ValidationError(_("Run at least one item."))
    items = dataset_version.items.all()
    if split:
        items = items.filter(split=split)
    usable = [item for item in items.order_by("position") if item_can_use(item=item, user=user)][:limit]
    if not usable:
        raise ValidationError(_("No item of this dataset version is yours to run (or the split has none)."))
    if len(usable) * repeats > MAX_PAIRS:
        raise ValidationError(_("At most %(n)s pairs per experiment.") % {"n": MAX_PAIRS})
    fields: dict = {"change_kind": change_kind}
    if change_kind == Experiment.Change.STRATEGY:
        if strategy is None:
            raise ValidationError(_("Choose the strategy to test."))
        strategy = Strategy.objects.select_for_update().get(pk=strategy.pk)
        if strategy.status != Strategy.Status.PROPOSED or strategy.current_version is None:
            raise ValidationError(_("Only a proposed strategy goes to an experiment."))
        fields |= {"strategy": strategy, "strategy_version": strategy.current_version}
        title = _("Strategy #%(id)s v%(v)s on %(dataset)s") % {
            "id": strategy.pk,
            "v": strategy.current_version.number,
            "dataset": dataset_version,
        }
    else:
        fields["change"] = _check_change(change_kind, change or {})
        title = _("%(kind)s on %(dataset)s") % {
            "kind": Experiment.Change(change_kind).label,
            "dataset": dataset_version,
        }
    experiment = Experiment.objects.create(
        title=str(title)[:200], dataset_version=dataset_version, split=split, repeats=repeats, created_by=user, **fields
    )
    order = [(item, repeat) for repeat in range(1, repeats + 1) for item in usable]
    random.Random(seed).shuffle(order)
    ExperimentPair.objects.bulk_create(
        ExperimentPair(experiment=experiment, item=item, repeat=repeat, position=n)
        for n, (item, repeat) in enumerate(order, start=1)
    )
    if strategy is not None:
        before = strategy.status
        strategy.status = Strategy.Status.EXPERIMENT
        strategy.save(update_fields=["status", "updated_at"])
        sent = {"id": experiment.pk, "dataset_version": dataset_version.pk, "pairs": len(order)}
        reason = _("Sent to experiment #%(id)s.") % {"id": experiment.pk}
        strategy_event_record(
            strategy=strategy,
            action=StrategyEvent.Action.EXPERIMENT,
            actor=user,
            reason=reason,
            from_status=before,
            experiment=sent,
        )
    experiment_advance(experiment_id=experiment.pk)  # its first pairs, queued once this commits
    return experiment


def _run_pass(run: Run) -> float:
    """1 when the item's checker passes the run's answer, else 0 (no answer fails)."""
    verdict = checker_verdict(run)
    return 1.0 if verdict is not None and verdict.passed else 0.0


def _complete(pairs: list[ExperimentPair]) -> None:
    """Record the differences of pairs whose two runs have ended (and been evaluated)."""
    for pair in pairs:
        control, treatment = pair.control_run, pair.treatment_run
        if control is None or treatment is None:
            # A run deleted (retention, a person) before it ended: the pair cannot be measured.
            pair.control_pass = pair.treatment_pass = pair.difference = None
            pair.completed_at = timezone.now()
            pair.save(update_fields=["control_pass", "treatment_pass", "difference", "completed_at"])
            continue
        if control.finished_at is None or treatment.finished_at is None:
            continue
        pair.control_pass, pair.treatment_pass = _run_pass(control), _run_pass(treatment)
        pair.difference = pair.treatment_pass - pair.control_pass
        pair.completed_at = timezone.now()
        pair.save(update_fields=["control_pass", "treatment_pass", "difference", "completed_at"])


def experiment_advance(*, experiment_id: int) -> Experiment:
    """Complete the pairs whose runs ended, decide or start the next pairs (module docstring).
    Idempotent and serialised on the experiment's row: safe to call after every run, and again."""
    with transaction.atomic():
        experiment = Experiment.objects.select_for_update().get(pk=experiment_id)
        if not experiment.running:
            return experiment
        in_flight = list(
            experiment.pairs.filter(control_run__isnull=False, completed_at__isnull=True)
            .select_related("control_run__dataset_item", "treatment_run__dataset_item")
            .order_by("position")
        )
        _complete(in_flight)
        differences = experiment.pairs.filter(difference__isnull=False).values_list("difference", flat=True)
        verdict = paired_verdict(differences)
        waiting = sum(1 for pair in in_flight if pair.completed_at is None)
        if verdict.decision != "continue":
            _finish(experiment, verdict.decision, verdict)
            return experiment
        room = settings.EXPERIMENT_PAIRS_IN_FLIGHT - waiting
        fresh = list(
            experiment.pairs.filter(control_run__isnull=True, completed_at__isnull=True).order_by("position")[
                : max(room, 0)
            ]
        )
        for pair in fresh:
            _start_pair(experiment, pair)
        if not fresh and not waiting:
            _finish(experiment, Experiment.Decision.UNDECIDED, verdict)
    return experiment


def _start_pair(experiment: Experiment, pair: ExperimentPair) -> None:
    item = pair.item
    runs = {}
    for arm in ("control", "treatment"):
        # A task per run: each arm's sandbox starts from its own fresh copy of the item's files.
        task = Task.objects.create(
            text=item.text,
            kind=item.kind,
            workspace=dataset_item_workspace(item=item),
            created_by=experiment.created_by,
        )
        reserved = (task.workspace.size_bytes or 0) if task.workspace_id else 0
        runs[arm] = Run.objects.create(
            task=task, task_kind=task.kind, purpose=Run.Purpose.EXPERIMENT, dataset_item=item, sandbox_bytes=reserved
        )
    pair.control_run, pair.treatment_run = runs["control"], runs["treatment"]
    pair.save(update_fields=["control_run", "treatment_run"])
    # Either arm first, at random: neither arm always gets the warmer cache or the quieter minute.
    for run in random.sample(list(runs.values()), 2):
        queue.run_execute(run.pk)


def _finish(
    experiment: Experiment, decision: str, verdict, *, status: str = Experiment.Status.FINISHED, by=None
) -> None:
    experiment.status = status
    experiment.decision = decision
    experiment.finished_at = timezone.now()
    experiment.verdict = {**verdict.as_json(), "decision": decision, "arms": arm_figures(experiment)}
    experiment.save(update_fields=["status", "decision", "finished_at", "verdict"])
    # What was still under way is not needed for the verdict: stopped, not left to run.
    under_way = Run.objects.filter(
        experiment_pair_ids(experiment), purpose=Run.Purpose.EXPERIMENT, status__in=Run.ACTIVE_STATUSES
    )
    for run_id in under_way.values_list("pk", flat=True):
        Run.objects.filter(pk=run_id).update(cancel_requested=True)
        lifecycle.run_end(run_id=run_id, status=Run.Status.CANCELLED, error=_("The experiment ended."), by=by)
    strategy = experiment.strategy
    if strategy is None:
        return
    strategy = Strategy.objects.select_for_update().get(pk=strategy.pk)
    if strategy.status != Strategy.Status.EXPERIMENT:
        return
    before = strategy.status
    if status == Experiment.Status.STOPPED:
        strategy.status = Strategy.Status.PROPOSED
        strategy.save(update_fields=["status", "updated_at"])
    reason = _("Experiment #%(id)s: %(decision)s.") % {
        "id": experiment.pk,
        "decision": experiment.get_decision_display(),
    }
    strategy_event_record(
        strategy=strategy,
        action=StrategyEvent.Action.EXPERIMENT_END,
        actor=by,
        reason=str(reason),
        from_status=before,
        experiment={"id": experiment.pk, **experiment.verdict},
    )


def experiment_pair_ids(experiment: Experiment) -> Q:
    """On Run: the runs of ``experiment``'s pairs, in either arm."""
    return Q(experiment_control__experiment=experiment) | Q(experiment_treatment__experiment=experiment)


def experiment_stop(*, experiment: Experiment, user: AbstractBaseUser) -> Experiment:
    """Stop a running experiment by hand: its figures so far are frozen, its runs under way
    cancelled, and a strategy it tested goes back to proposed."""
    _require(user, experiment.change_kind)
    if not _stop(experiment.pk, by=user):
        raise ValidationError(_("This experiment has already ended."))
    return Experiment.objects.get(pk=experiment.pk)


def _stop(experiment_id: int, *, by: AbstractBaseUser | None) -> bool:
    with transaction.atomic():
        locked = Experiment.objects.select_for_update().get(pk=experiment_id)
        if not locked.running:
            return False
        differences = locked.pairs.filter(difference__isnull=False).values_list("difference", flat=True)
        _finish(
            locked, Experiment.Decision.UNDECIDED, paired_verdict(differences), status=Experiment.Status.STOPPED, by=by
        )
    return True


def experiments_stop_for(*, strategy: Strategy, by: AbstractBaseUser | None) -> None:
    """Stop the strategy's running experiments (it was decided on without them)."""
    for experiment_id in strategy.experiments.filter(status=Experiment.Status.RUNNING).values_list("pk", flat=True):
        _stop(experiment_id, by=by)


def experiment_of_run(run: Run) -> int | None:
    """The experiment an experiment run belongs to (None: not an experiment's run)."""
    if run.purpose != Run.Purpose.EXPERIMENT:
        return None
    return (
        ExperimentPair.objects.filter(experiment_pair_ids_for_run(run.pk))
        .values_list("experiment_id", flat=True)
        .first()
    )


def experiment_pair_ids_for_run(run_id: int) -> Q:
    return Q(control_run_id=run_id) | Q(treatment_run_id=run_id)


def yields_to_production(run_id: int) -> bool:
    """Whether a queued experiment run should wait: production runs are waiting for a worker.
    Only runs queued lately count, so a production run whose message was lost (the reaper
    re-sends it) cannot hold experiments back for ever."""
    run = Run.objects.filter(pk=run_id).values("purpose", "status").first()
    if run is None or run["purpose"] != Run.Purpose.EXPERIMENT or run["status"] != Run.Status.QUEUED:
        return False
    since = timezone.now() - timedelta(seconds=settings.RUN_STALE_AFTER_SECONDS)
    return Run.objects.filter(purpose=Run.Purpose.PRODUCTION, status=Run.Status.QUEUED, created_at__gte=since).exists()


def experiments_resume() -> None:
    """Advance every running experiment (the reaper's beat): one whose advance message was lost
    goes on, and one whose pairs all ended is decided."""
    for experiment_id in Experiment.objects.filter(status=Experiment.Status.RUNNING).values_list("pk", flat=True):
        queue.experiment_advance(experiment_id)
