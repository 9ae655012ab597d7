"""The loop, demonstrated: a realistic workload on the offline model, before and after the
strategy loop, with the figures that matter.

Honest by construction: the offline model knows nothing about strategies. Whatever improves
has to come from mechanisms that work with any model: guardrails the engine enforces, worked
examples, re-planning. Runs execute in this process (no broker needed); the strategy decisions
a reviewer would take are taken by the explicit, demo-only ``auto_approve`` rule, and only as the
tests say: promote what its trial's test says to promote, roll back what its test says has no
effect worth having (or, automatically, what it says does harm), and report a trial still
undecided when the run cap is reached as "undecided after N runs", left on trial - never rolled
back as if by a result. Every phase says which strategies were live in it (applied, or withheld
in a trial's control arm), from the runs' own records.
"""

import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.utils import timezone

from feedback import metrics, roles
from feedback.agent.llm import describe_backend
from feedback.agent.loop import execute_run
from feedback.agent.tools import ToolContext
from feedback.agent.tools.text import analyze_text
from feedback.demo import seed_workspace
from feedback.evaluation.chain import evaluate_run
from feedback.evaluation.evaluators import numbers_in, refusal_in
from feedback.models import Run, Strategy, Task, Workspace

from . import demo_report
from .conditions import matches
from .hindsight import evidence_hindsight, tally
from .proposals import mine_and_propose
from .services import strategy_approve, strategy_promote, strategy_reject, strategy_roll_back
from .trials import check_trials, trial_stats


@dataclass
class Phase:
    name: str
    since: datetime
    until: datetime
    runs: int
    # Of the runs whose answer a strict checker can tell: how many it found correct.
    checked: int = 0
    correct: int = 0
    seconds: float = 0.0
    run_ids: list[int] = field(default_factory=list)

    def figures(self) -> dict:
        window = metrics.Window(since=self.since, until=self.until)
        errors = metrics.repeated_error_summary(window)
        scores = metrics.score_summary(window)
        interventions = metrics.intervention_summary(window)
        return {
            "runs": self.runs,
            "average score": scores["avg_score"],
            # The share of ended runs whose task was accomplished (metrics.score_trend).
            "accomplished rate": scores["success_rate"],
            "errors per run": (errors["errors"] or 0) / max(1, self.runs),
            "repeated-error rate": errors["repeated_rate"],
            "repeated errors per run": errors["repeated_per_run"],
            "intervention rate": interventions["rate"],
            # Not the product's own evaluators, which the loop learns from: an independent check
            # of each answer against what the workspace really holds (strictly_correct).
            "strict correct rate": self.correct / self.checked if self.checked else None,
            "seconds per run": self.seconds / max(1, self.runs),
        }


def _words(workspace: Workspace, path: str) -> int:
    return analyze_text(ToolContext(run_id=0, workspace=workspace.path), path=path)["words"]


def workload(rng: random.Random, n: int, workspace: Workspace) -> list[tuple[str, str, str]]:
    """(kind, text, expected answer): what staff ask, with the answers a person would check."""
    report, notes, release = (_words(workspace, p) for p in ("report.txt", "docs/meeting-notes.md",
                                                             "docs/release-notes.txt"))  # fmt: skip
    families = [
        # The file is where the task says: the model succeeds.
        (25, lambda: ("file_analysis", "Summarise report.txt and count its words", f"/\\b{report} words/")),
        # The file sits in a sub-folder the task does not name: the model looks in the root only.
        (13, lambda: ("file_analysis", "Summarise release-notes.txt and count its words", f"/\\b{release} words/")),
        (12, lambda: ("file_analysis", "Count the words in meeting-notes.md", f"/\\b{notes} words/")),
        (20, lambda: ("email_triage", "Classify the emails in inbox/ and flag the urgent ones", "/3 urgent/")),
        (20, lambda: _sum(rng)),
        # Idioms for numbers: beyond the rule-based model's reading, whatever the strategies say (it
        # reads "seven plus nine", not "a dozen plus nine", and says so).
        (10, lambda: ("arithmetic", f"What is {rng.choice(['a dozen', 'half a dozen', 'a score'])} plus nine?", "")),
    ]
    weights = [w for w, _ in families]
    return [rng.choices(families, weights)[0][1]() for _ in range(n)]


def _sum(rng: random.Random) -> tuple[str, str, str]:
    a, b, c = rng.randint(2, 99), rng.randint(2, 99), rng.randint(2, 9)
    return "arithmetic", f"What is ({a} + {b}) * {c}?", str((a + b) * c)


# The inbox's urgent emails, by their number (the demo workspace: a site down, a locked account
# before payroll, a customer who cannot log in).
URGENT_EMAILS = frozenset({"002", "003", "005"})
_EMAIL_REF = re.compile(r"\b(00[1-6])\b")
_NEGATED = re.compile(r"\b(?:not|non|isn't|is not|no)[\s-]+urgent", re.I)


def strictly_correct(kind: str, text: str, expected: str, output: str) -> bool | None:
    """Whether an answer is right, checked strictly against the workspace; None where no check
    applies (a task without a known answer). Stricter than the reference evaluator on purpose:
    the count must be the one stated, every urgent email named as urgent and no other."""
    if not expected or refusal_in(output):
        return False if expected else None
    if kind == "arithmetic":
        numbers = numbers_in(output)
        return bool(numbers) and abs(numbers[-1] - float(expected)) < 1e-9
    if kind == "file_analysis":
        count = int(re.search(r"\d+", expected).group())
        stated = {int(n.replace(",", "")) for n in re.findall(r"\b(\d[\d,]*)\s+words\b", output)}
        return stated == {count}
    if kind == "email_triage":
        flagged = set()
        for line in output.splitlines():
            if "urgent" in line.lower() and not _NEGATED.search(line):
                flagged |= set(_EMAIL_REF.findall(line))
        return flagged == URGENT_EMAILS
    return None


def run_phase(name: str, items: list[tuple[str, str, str]], user, workspace: Workspace,
              out: Callable[[str], None] | None = None) -> Phase:  # fmt: skip
    phase = Phase(name, timezone.now(), timezone.now(), len(items))
    for number, (kind, text, expected) in enumerate(items, 1):
        started = time.monotonic()
        task = Task.objects.create(text=text, kind=kind, expected_answer=expected, workspace=workspace, created_by=user)
        run = Run.objects.create(task=task, task_kind=kind)
        execute_run(run.pk)
        evaluate_run(run.pk)  # idempotent: the task queued when the run ended finds it done
        run.refresh_from_db()
        phase.seconds += time.monotonic() - started
        phase.run_ids.append(run.pk)
        correct = strictly_correct(kind, text, expected, run.final_output or "")
        if correct is not None:
            phase.checked += 1
            phase.correct += correct
        if out is not None:
            verdict = {True: "correct", False: "wrong", None: "unchecked"}[correct]
            out(f"  [{name} {number}/{len(items)}] run #{run.pk} {kind}: {run.status}, score "
                f"{'—' if run.score is None else f'{run.score:.2f}'}, strict check {verdict} "
                f"({time.monotonic() - started:.0f} s)")  # fmt: skip
    phase.until = timezone.now()
    return phase


def _demo_reviewer():
    user, created = get_user_model().objects.get_or_create(username="demo-loop")
    if created:
        user.set_unusable_password()  # an actor in the audit log, never a login
        user.save()
    roles.ensure_groups()
    user.groups.add(Group.objects.get(name=roles.REVIEWER))
    return get_user_model().objects.get(pk=user.pk)  # fresh permission cache


def run_demo_loop(*, tasks_per_phase: int = 150, seed: int = 7, auto_approve: bool = False,
                  out: Callable[[str], None] = print, progress: bool = False,
                  trial_batch: int | None = None, trial_limit: int | None = None,
                  trial_strategies: int | None = None) -> dict:  # fmt: skip
    """The loop end to end; returns its report (demo_report.py: data, shown by a template)."""
    rng = random.Random(seed)
    workspace = seed_workspace()
    user = get_user_model().objects.filter(username="staff").first()
    report = {
        "model": describe_backend(),
        "tasks_per_phase": tasks_per_phase,
        "seed": seed,
        "live_at_start": demo_report.live_now(),
        "phases": {},
        "figures": {},
        "proposed": [],
        "experiment": None,
        "decisions": [],
        "auto_approve": auto_approve,
    }
    out(f"Model: {report['model']}")
    out(f"Phase 1: {tasks_per_phase} tasks, the baseline ({_live_line(report['live_at_start'])} at its start)...")
    each = out if progress else None
    before = run_phase("before", workload(rng, tasks_per_phase, workspace), user, workspace, each)
    _record_phase(report, before, out)

    proposed = mine_and_propose(window_days=settings.STRATEGY_MINING_WINDOW_DAYS)
    report["proposed"] = [
        {
            "strategy": s.pk,
            "title": s.title,
            "pattern_kind": s.pattern_kind,
            "support": s.support,
            "guardrails": len(s.current_version.guardrails),
        }
        for s in proposed
    ]
    out(f"Mining proposed or reinforced {len(proposed)} strateg(ies):")
    for row in report["proposed"]:
        out(
            f"  #{row['strategy']} [{row['pattern_kind']}] {row['title']} (support {row['support']}, "
            f"guardrails {row['guardrails']})"
        )
    if not auto_approve:
        out("Stopping here: approve strategies in the browser (or pass --auto-approve, demo only).")
        return report

    reviewer = _demo_reviewer()
    chosen = reviewers_pick(list(Strategy.objects.filter(status=Strategy.Status.PROPOSED).order_by("pk")))
    chosen = _experiment_stage(chosen[:trial_strategies] if trial_strategies else chosen, report, out, reviewer)
    for s in chosen:
        strategy_approve(strategy=s, reviewer=reviewer, reason="demo-loop --auto-approve", trial_fraction=0.5)
    out("Phase 2: the proposals on trial, in batches until every trial is decided...")
    batch, limit = trial_batch or max(20, tasks_per_phase // 3), trial_limit or 8 * tasks_per_phase
    trial, rolled = _trial_phase(rng, [s.pk for s in chosen], batch, limit, user, workspace, each)
    _record_phase(report, trial, out)
    report["trial_limit"] = limit
    report["decisions"] = _end_trials([s.pk for s in chosen], rolled, reviewer)
    out("Trial decisions:\n" + "\n".join(map(demo_report.decision_text, report["decisions"]) or ["  (none on trial)"]))

    out(f"Phase 3: {tasks_per_phase} tasks after the decisions ({_live_line(demo_report.live_now())})...")
    after = run_phase("after", workload(rng, tasks_per_phase, workspace), user, workspace, each)
    _record_phase(report, after, out)
    out(demo_report.format_figures(report["figures"]))
    return report


def _live_line(live: list[dict]) -> str:
    if not live:
        return "no live strategy"
    return "live: " + ", ".join(f"#{row['strategy']} ({row['status']})" for row in live)


def _record_phase(report: dict, phase: "Phase", out: Callable[[str], None]) -> None:
    live = demo_report.live_in(phase.run_ids)
    report["phases"][phase.name] = {"runs": phase.runs, "live": live}
    report["figures"][phase.name] = phase.figures()
    out(f"  {phase.runs} {phase.name} runs; strategies live in them: {demo_report.live_text(live)}")


def _experiment_stage(proposals: list[Strategy], report: dict, out: Callable[[str], None], reviewer) -> list[Strategy]:
    """proposed -> experiment -> trial: each proposal runs, in a paired experiment, on a dataset of
    its evidence runs (their tasks, expected answers and workspace files), with and without it.
    The demo reviewer then acts on the verdict as the tests say: "promote" goes on to trial,
    "reject" (significant harm) is rejected, and an experiment undecided after every item goes
    on to trial too (the trial's live traffic has more to say), reported as such. A proposal
    without an evidence run that has an expected answer has no dataset: straight to trial, said."""
    from feedback.datasets.services import dataset_from_evidence
    from feedback.experiments.inline import experiment_run_here
    from feedback.experiments.services import experiment_start

    stage = {"available": True, "strategies": [s.pk for s in proposals], "experiments": []}
    report["experiment"] = stage
    to_trial = []
    for strategy in proposals:
        try:
            version = dataset_from_evidence(
                strategy=strategy, user=reviewer, name=f"demo-evidence-{strategy.pk}-{timezone.now():%Y%m%d%H%M%S}"
            )
        except (ValueError, ValidationError) as exc:
            out(f"  #{strategy.pk}: no dataset ({exc}); straight to trial.")
            stage["experiments"].append({"strategy": strategy.pk, "experiment": None, "decision": "no_dataset"})
            to_trial.append(strategy)
            continue
        experiment = experiment_start(user=reviewer, dataset_version=version, change_kind="strategy", strategy=strategy)
        out(f"  #{strategy.pk}: experiment #{experiment.pk} on {version} ({experiment.pairs.count()} pairs)...")
        experiment = experiment_run_here(experiment.pk)
        verdict = experiment.verdict
        row = {
            "strategy": strategy.pk,
            "experiment": experiment.pk,
            "decision": experiment.decision,
            **{k: verdict.get(k) for k in ("pairs", "wins", "losses", "ties", "difference", "low", "high")},
        }
        stage["experiments"].append(row)
        out(f"  #{strategy.pk}: {demo_report.experiment_text(row)}")
        if experiment.decision == "reject":
            strategy_reject(
                strategy=strategy, reviewer=reviewer, reason=f"demo-loop: its experiment #{experiment.pk} says reject"
            )
        else:
            to_trial.append(strategy)
    return to_trial


def _end_trials(trialled: list[int], rolled: list[int], reviewer) -> list[dict]:
    """Each trial of this loop ended by its test's verdict, or reported undecided (module docstring)."""
    decisions = []
    for s in Strategy.objects.filter(pk__in=trialled).order_by("pk"):
        stats = trial_stats(s)
        summary = f"n={stats.treatment.n}/{stats.control.n}, difference {stats.difference or 0:+.3f}"
        if s.pk in rolled:
            end = "auto_rolled_back"
        elif s.status != Strategy.Status.TRIAL:
            continue  # decided by someone else meanwhile
        elif stats.recommendation == "promote":
            strategy_promote(strategy=s, reviewer=reviewer, reason=f"demo-loop: the trial says promote ({summary})")
            end = "promoted"
        elif stats.recommendation in ("no_effect", "roll_back"):
            verdict = stats.recommendation.replace("_", " ")
            strategy_roll_back(strategy=s, reviewer=reviewer, reason=f"demo-loop: the trial says {verdict} ({summary})")
            end = "rolled_back"
        else:
            end = "undecided"  # collecting more, blocked or a mismatched split: not a result
        decisions.append(demo_report.decision(s, stats, end))
    return decisions


def _trial_phase(rng: random.Random, trialled: list[int], batch: int, limit: int, user, workspace: Workspace,
                 out: Callable[[str], None] | None) -> tuple[Phase, list[int]]:  # fmt: skip
    """Like a patient reviewer: keep collecting runs while one of ``trialled``'s recommendation
    is "collect more" (the always-valid test lets it look after every batch), up to ``limit`` runs."""
    total = Phase("trial", timezone.now(), timezone.now(), 0)
    rolled: list[int] = []
    while total.runs < limit:
        items = _trial_workload(rng, min(batch, limit - total.runs), workspace)
        if not items:
            break
        phase = run_phase("trial", items, user, workspace, out)
        total.runs += phase.runs
        total.checked += phase.checked
        total.correct += phase.correct
        total.seconds += phase.seconds
        total.run_ids += phase.run_ids
        rolled += check_trials()
        undecided = [
            s for s in Strategy.objects.filter(pk__in=trialled, status=Strategy.Status.TRIAL)
            if trial_stats(s).recommendation == "collect_more"
        ]  # fmt: skip
        if not undecided:
            break
    total.until = timezone.now()
    return total, rolled


def reviewers_pick(proposals: list[Strategy]) -> list[Strategy]:
    """The proposals in the order a reviewer with little time takes them: first those whose
    guardrails would have acted on the most of their evidence runs (the review page's hindsight:
    the engine enforces them, whatever the model makes of guidance), then the best supported. A
    run takes part in one trial only: every strategy more on trial is fewer runs in each arm."""

    def fixed_by_guardrail(strategy: Strategy) -> int:
        evidence = list(strategy.evidence.select_related("task__workspace").order_by("-pk")[:50])
        return tally(evidence_hindsight(strategy, evidence))["guardrail"]

    return sorted(proposals, key=lambda s: (-fixed_by_guardrail(s), -s.support, s.pk))


def _trial_workload(rng: random.Random, n: int, workspace: Workspace) -> list[tuple[str, str, str]]:
    """The workload's tasks that a strategy on trial applies to: a run no trial matches tells
    the trial nothing, and on a real model every run costs the better part of a minute."""
    conditions = [
        s.current_version.condition
        for s in Strategy.objects.filter(status=Strategy.Status.TRIAL).select_related("current_version")
    ]
    items: list[tuple[str, str, str]] = []
    # Bounded: a condition no task of the workload meets leaves the batch short, not the loop stuck.
    for _ in range(50):
        drawn = workload(rng, n, workspace)
        items += [t for t in drawn if any(matches(c, task_kind=t[0], text=t[1]) for c in conditions)]
        if len(items) >= n:
            break
    return items[:n]
