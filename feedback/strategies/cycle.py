"""The learning cycle on the workload datasets (issue 25), end to end through the product's own
services, on whatever model is configured:

1. **baseline**: every item of each workload's *mining* split is submitted as a production run
   (``task_submit``, with the item's expected value as the task's reference, tied to the item it
   answers), executed and evaluated as usual; the *held-out* items are run too, measured apart;
2. **mining** (``mine_and_propose`` over STRATEGY_MINING_WINDOW_DAYS) and its proposals, and the
   insight lists written from the baseline's failure/success pairs (``insights_update``);
3. **a reviewer's pick**: a named reviewer (``reviewer``: recorded as the actor of every decision)
   takes, per family, the proposals that apply to most of its held-out items, then as
   ``demo.reviewers_pick`` orders them, and the family's insight list; without a reviewer the
   cycle stops at the proposals;
4. **a paired experiment** per picked strategy on its family's held-out items, with and without
   it, decided by the sequential sign test (experiments/paired.py); optionally one experiment per
   strategy *kind* (``KINDS``: the picked versions' guidance, worked examples or guardrails alone);
5. **promotion** only where the experiment says "promote": approved, then promoted by
   ``strategy_promote``, which checks that verdict itself (verdicts.py); "reject" is rejected;
   "undecided" is said and left in its experiment stage for a person. Never an override;
6. **after**: the held-out items again, measured apart, with what production gets now.

Held-out items are *measured apart* (``Run.purpose`` experiment, in no pair): they get exactly
what a production run gets now (the active strategies; no trial arm), are evaluated by the same
chain, and never enter mining, worked examples, trials or production metrics: a held-out item
run as production would be mined by the next cycle (its window reaches back a month) and could
come back as a worked example holding its own answer.

Safe to run again: one cycle at a time (a JobLock, renewed after every run, so a killed cycle's
lock lapses within LEARNING_CYCLE_SECONDS); an experiment an interrupted cycle left running is
stopped first (its figures frozen, its strategy back to proposed); everything else is rows the
services wrote, each under its own lock. The report is saved after every stage (``keep``).
"""

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import PermissionDenied, ValidationError
from django.utils import timezone

from feedback import locks, roles
from feedback.agent.llm import describe_backend
from feedback.datasets.services import dataset_item_workspace, item_reference
from feedback.datasets.workloads import seed_workloads
from feedback.evaluation.chain import evaluate_run
from feedback.experiments.inline import execute_unattended, experiment_run_here
from feedback.experiments.services import experiment_start, experiment_stop
from feedback.models import Dataset, DatasetItem, DatasetVersion, Experiment, Run, Strategy, Task
from feedback.services import task_submit

from . import cycle_report, demo_report
from .cycle_kinds import KINDS, alone, insight_lists, pick, picked_versions, revisable
from .proposals import mine_and_propose
from .services import IllegalTransition, strategy_approve, strategy_edit, strategy_promote, strategy_reject

# The families, by the task kind of their items, and the workload dataset of each (workloads.py).
FAMILIES = {
    Task.Kind.ARITHMETIC: "Workload: arithmetic",
    Task.Kind.FILE_ANALYSIS: "Workload: file analysis",
    Task.Kind.EMAIL_TRIAGE: "Workload: support-email triage",
}
HELD_OUT, MINING = DatasetItem.Split.HELD_OUT, DatasetItem.Split.MINING


def cycle_reviewer(username: str):
    """The reviewer the cycle decides as: an existing account must be a reviewer; a new one is
    made a reviewer with no password (an actor in the audit log, never a login)."""
    user, created = get_user_model().objects.get_or_create(username=username)
    if created:
        user.set_unusable_password()
        user.save()
        roles.ensure_groups()
        user.groups.add(Group.objects.get(name=roles.REVIEWER))
        user = get_user_model().objects.get(pk=user.pk)  # a fresh permission cache
    if not (user.is_active and user.has_perm("feedback.decide_strategy") and user.has_perm("feedback.add_experiment")):
        raise PermissionDenied(f"{username} is not a reviewer: the cycle decides only as one.")
    return user


@dataclass
class Cycle:
    """One cycle's options, its reviewer, its report, and how it says what it does."""

    versions: dict[str, DatasetVersion]  # the workload dataset of each family, by its task kind
    reviewer: Any  # None: stop at the proposals
    user: Any  # who submits the baseline's production runs (a task needs its author)
    mining_limit: int | None
    held_out_limit: int | None
    picks: int
    insight_lists: bool  # the family's insight list picked beside the proposals
    kinds: Sequence[str]
    seed: int
    out: Callable[[str], None]
    keep: Callable[[dict], None]
    lock_token: str
    report: dict = field(default_factory=dict)

    def items(self, kind: str, split: str) -> list[DatasetItem]:
        limit = self.mining_limit if split == MINING else self.held_out_limit
        return list(self.versions[kind].items.filter(split=split).order_by("position")[:limit])

    def stage(self, name: str, line: str) -> None:
        self.report["stages"].append({"stage": name, "at": timezone.now().isoformat()})
        self.out(f"Stage {len(self.report['stages'])}: {name}: {line}")
        self.keep(self.report)

    def run_items(self, phase: str, kind: str, split: str, *, production: bool) -> list[int]:
        items = self.items(kind, split)
        ids = []
        for number, item in enumerate(items, 1):
            started = time.monotonic()
            run = self._submit(item) if production else self._apart(item)
            run = _execute_here(run.pk, refuse_as=self.reviewer)
            ids.append(run.pk)
            locks.job_lock_renew(name=locks.LEARNING_CYCLE, token=self.lock_token, seconds=locks.LEARNING_CYCLE_SECONDS)
            self.out(
                f"  [{phase} {kind} {number}/{len(items)}] {cycle_report.run_line(run)} "
                f"({time.monotonic() - started:.1f} s)"
            )
        self.report["runs"].setdefault(phase, {})[kind] = ids
        return ids

    def _submit(self, item: DatasetItem) -> Run:
        run = task_submit(
            user=self.user,
            text=item.text,
            kind=item.kind,
            expected_answer=item_reference(item),
            workspace=dataset_item_workspace(item=item),
        )
        Run.objects.filter(pk=run.pk).update(dataset_item=item)  # the item it answers: its checker
        return run

    def _apart(self, item: DatasetItem) -> Run:
        # As an experiment's arm is made (experiments/services.py), in no pair: nothing is changed.
        task = Task.objects.create(
            text=item.text,
            kind=item.kind,
            expected_answer=item_reference(item),
            workspace=dataset_item_workspace(item=item),
            created_by=self.user,
        )
        reserved = (task.workspace.size_bytes or 0) if task.workspace_id else 0
        return Run.objects.create(
            task=task, task_kind=task.kind, purpose=Run.Purpose.EXPERIMENT, dataset_item=item, sandbox_bytes=reserved
        )

    def experiment(self, kind: str, row: dict, **change) -> Experiment:
        experiment = experiment_start(
            user=self.reviewer,
            dataset_version=self.versions[kind],
            split=HELD_OUT,
            limit=self.held_out_limit,
            seed=self.seed,
            **change,
        )
        pairs = experiment.pairs.count()
        what = f"{row['kind']} alone: " if "kind" in row else ""
        self.out(f"  experiment #{experiment.pk} ({what}{experiment.title}): {pairs} pairs on the held-out items...")

        def each_run(run_id: int) -> None:
            locks.job_lock_renew(name=locks.LEARNING_CYCLE, token=self.lock_token, seconds=locks.LEARNING_CYCLE_SECONDS)
            self.out(f"  [experiment #{experiment.pk}] {cycle_report.run_line(Run.objects.get(pk=run_id))}")

        experiment = experiment_run_here(
            experiment.pk, timeout=_run_timeout() * 2 * pairs, each_run=each_run, refuse_as=self.reviewer
        )
        row.update(cycle_report.experiment_row(experiment))
        self.out(f"  {cycle_report.experiment_text(row)}")
        self.keep(self.report)
        return experiment


def _workload_versions(families: Sequence[str]) -> dict[str, DatasetVersion]:
    seed_workloads()  # once per install: an existing dataset is left as it is
    versions = {}
    for kind in families:
        dataset = Dataset.objects.filter(name=FAMILIES[kind]).first()
        versions[kind] = dataset.latest_version() if dataset else None
        if versions[kind] is None:
            raise ValidationError(f"The workload dataset {FAMILIES[kind]!r} has no version.")
    return versions


def _cycle_user():
    # Not the Makefile's reviewer name: that account, once made here without a role, could not review.
    user, created = get_user_model().objects.get_or_create(username="workload")
    if created:
        user.set_unusable_password()
        user.save()
    return user


def _run_timeout() -> float:
    return settings.AGENT_MAX_SECONDS + 120


def _execute_here(run_id: int, *, refuse_as) -> Run:
    """Execute and evaluate the run here; a worker that took it first is waited for. Unattended:
    the cycle's reviewer refuses the sensitive calls a run waits for (a model that e-mails its
    arithmetic), as they would in the inbox, and the run goes on without them."""
    execute_unattended(run_id, refuse_as=refuse_as)
    deadline = time.monotonic() + _run_timeout()
    while Run.objects.filter(pk=run_id, status__in=Run.ACTIVE_STATUSES).exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    evaluate_run(run_id)  # idempotent: a worker's evaluation, if any, stands
    return Run.objects.select_related("dataset_item").get(pk=run_id)


def _stop_interrupted(cycle: "Cycle") -> list[int]:
    """Stop the experiments an interrupted cycle left running (module docstring): the reviewer's,
    on a workload's held-out split (no other cycle runs: the lock is held)."""
    stopped = []
    running = Experiment.objects.filter(
        status=Experiment.Status.RUNNING,
        created_by=cycle.reviewer,
        split=HELD_OUT,
        dataset_version__in=list(cycle.versions.values()),
    )
    for experiment in running:
        experiment_stop(experiment=experiment, user=cycle.reviewer)
        stopped.append(experiment.pk)
    return stopped


def run_cycle(
    *,
    families: Sequence[str] = tuple(FAMILIES),
    mining_limit: int | None = None,
    held_out_limit: int | None = None,
    reviewer=None,
    picks: int = 1,
    insight_lists: bool = True,
    kinds: Sequence[str] = (),
    seed: int = 7,
    out: Callable[[str], None] = print,
    keep: Callable[[dict], None] = lambda report: None,
) -> dict:
    """The cycle (module docstring); returns its report (cycle_report.py). ``reviewer``: the user
    who decides (None: stop at the proposals); ``kinds``: strategy kinds measured one by one."""
    unknown = [k for k in families if k not in FAMILIES] + [k for k in kinds if k not in KINDS]
    if unknown:
        raise ValidationError(
            f"Unknown: {', '.join(unknown)} (families: {', '.join(FAMILIES)}; kinds: {', '.join(KINDS)})."
        )
    lock = locks.job_lock_acquire(name=locks.LEARNING_CYCLE, seconds=locks.LEARNING_CYCLE_SECONDS, user=reviewer)
    if lock is None:
        held = locks.job_lock_held(locks.LEARNING_CYCLE)
        since = f" since {timezone.localtime(held.acquired_at):%Y-%m-%d %H:%M}" if held else ""
        raise ValidationError(f"A learning cycle is running{since}: one at a time.")
    try:
        cycle = Cycle(
            versions=_workload_versions(families),
            reviewer=reviewer,
            user=reviewer or _cycle_user(),
            mining_limit=mining_limit,
            held_out_limit=held_out_limit,
            picks=picks,
            insight_lists=insight_lists,
            kinds=kinds,
            seed=seed,
            out=out,
            keep=keep,
            lock_token=lock.token,
        )
        cycle.report = cycle_report.new_report(
            model=describe_backend(),
            families=list(families),
            reviewer=reviewer.get_username() if reviewer else "",
            options={
                "mining_limit": mining_limit,
                "held_out_limit": held_out_limit,
                "picks": picks,
                "insight_lists": insight_lists,
                "kinds": list(kinds),
                "seed": seed,
                "window_days": settings.STRATEGY_MINING_WINDOW_DAYS,
            },
            live_at_start=demo_report.live_now(),
        )
        _run(cycle)
    finally:
        locks.job_lock_release(name=locks.LEARNING_CYCLE, token=lock.token)
    return cycle.report


def _run(cycle: Cycle) -> None:
    report, out = cycle.report, cycle.out
    out(f"Model: {report['model']}")
    if cycle.reviewer is not None:
        report["stopped_experiments"] = _stop_interrupted(cycle)
        if report["stopped_experiments"]:
            out(f"Stopped experiment(s) an interrupted cycle left running: {report['stopped_experiments']}")
    cycle.stage(
        "baseline",
        "the mining split as production runs, the held-out split measured apart "
        f"({demo_report.live_text(report['live_at_start'])} at the start)",
    )
    for kind in cycle.versions:
        cycle.run_items("baseline", kind, MINING, production=True)
    for kind in cycle.versions:
        cycle.run_items("before", kind, HELD_OUT, production=False)
    cycle_report.add_figures(report, "baseline")
    cycle_report.add_figures(report, "before")

    cycle.stage("mining", f"mine_and_propose over the last {settings.STRATEGY_MINING_WINDOW_DAYS} day(s)")
    proposed = mine_and_propose(window_days=settings.STRATEGY_MINING_WINDOW_DAYS)
    proposed += insight_lists()
    report["proposed"] = [cycle_report.strategy_row(s) for s in proposed]
    for row in report["proposed"]:
        out(f"  #{row['strategy']} [{row['pattern_kind']}] {row['title']} ({row['status']}, support {row['support']})")
    if cycle.reviewer is None:
        report["stopped"] = "no reviewer: the proposals wait for one (pass --auto-approve-as)"
        cycle.stage("stopped", report["stopped"])
        return

    cycle.stage("pick", f"{cycle.reviewer.get_username()} picks up to {cycle.picks} proposal(s) per family")
    picked = pick(cycle)
    cycle.stage("experiment", "each pick with and without it on its family's held-out items")
    for row in picked:
        strategy = Strategy.objects.get(pk=row["strategy"])
        cycle.experiment(row["family"], row, change_kind="strategy", strategy=strategy)
    for kind, versions in picked_versions(picked).items():
        for name in cycle.kinds:
            change = KINDS[name](versions)
            row = {"family": kind, "kind": name, "strategies": [v.strategy_id for v in versions]}
            report["kind_experiments"].append(row)
            if change is None:
                row["decision"] = "none"  # the picks have nothing of that kind
                out(f"  {kind}: no {name} in the picked strategies: nothing to measure")
                continue
            cycle.experiment(kind, row, change_kind=change[0], change=change[1])
    for row in list(picked):
        _revise(cycle, row)

    cycle.stage("promotion", "strategy_promote where the experiment says promote, and only there")
    for row in picked:
        if row.get("end") != "revised":  # its revision is decided instead
            _decide(cycle, row)
    cycle.stage("after", f"the held-out split again ({demo_report.live_text(demo_report.live_now())})")
    for kind in cycle.versions:
        cycle.run_items("after", kind, HELD_OUT, production=False)
    cycle_report.add_figures(report, "after")
    report["finished_at"] = timezone.now().isoformat()
    cycle.stage("done", "the report follows")


def _revise(cycle: Cycle, row: dict) -> None:
    """Where a pick's experiment did not say promote and one kind of it alone did, the reviewer
    does what the review page offers: edits the strategy to that kind alone (a new version, a
    proposal again) and tests the new version by its own experiment, on the same held-out items;
    the promotion stage then decides on that verdict. The pick itself is left as revised."""
    kind_row = revisable(row, cycle.report["kind_experiments"])
    if kind_row is None:
        return
    strategy = Strategy.objects.select_related("current_version").get(pk=row["strategy"])
    said = (
        f"learning cycle: experiment #{row['experiment']} says {row['decision']} for the whole strategy, "
        f"experiment #{kind_row['experiment']} says promote for its {kind_row['kind']} alone"
    )
    strategy_edit(
        strategy=strategy, editor=cycle.reviewer, reason=said, **alone(strategy.current_version, kind_row["kind"])
    )
    strategy.refresh_from_db()
    row["end"], kind_row["revised"] = "revised", True
    revised = {"family": row["family"], **cycle_report.strategy_row(strategy), "revised_from": row["experiment"]}
    revised |= {"applies_to": row["applies_to"], "held_out": row["held_out"], "alone": kind_row["kind"]}
    cycle.out(f"  #{strategy.pk}: revised to its {kind_row['kind']} alone (v{strategy.current_version.number})")
    cycle.report["picked"].append(revised)
    cycle.experiment(row["family"], revised, change_kind="strategy", strategy=strategy)


def _decide(cycle: Cycle, row: dict) -> None:
    """Promote on a "promote" verdict (the services check it again), reject on "reject", leave an
    undecided strategy in its experiment stage for a person; each said."""
    strategy = Strategy.objects.get(pk=row["strategy"])
    said = f"learning cycle: experiment #{row['experiment']} on the held-out items says {row['decision']}"
    try:
        if row["decision"] == Experiment.Decision.PROMOTE:
            strategy_approve(strategy=strategy, reviewer=cycle.reviewer, reason=said)
            strategy_promote(strategy=strategy, reviewer=cycle.reviewer, reason=said)
            row["end"] = "promoted"
        elif row["decision"] == Experiment.Decision.REJECT:
            strategy_reject(strategy=strategy, reviewer=cycle.reviewer, reason=said)
            row["end"] = "rejected"
        else:
            row["end"] = "not_promoted"
    except (ValidationError, IllegalTransition, PermissionDenied) as exc:
        row["end"], row["refused"] = "refused", " ".join(getattr(exc, "messages", [str(exc)]))
    cycle.out(
        f"  #{strategy.pk}: {cycle_report.END_TEXT[row['end']]}{': ' + row['refused'] if 'refused' in row else ''}"
    )
    cycle.keep(cycle.report)
