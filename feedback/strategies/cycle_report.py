"""What the learning cycle reports (strategies/cycle.py), as data, and its before / after table.

Every figure is counted from the runs' rows, per family and overall:

- **strict correct**: the dataset item's checker passes the run's answer (``checker_verdict``;
  no answer fails), never the heuristic judge;
- **repeated errors per run**: the metrics' one definition (an error whose signature an earlier
  production run had: ``metrics.counts.run_error_counts``), per run;
- **accomplished agrees**: the share of runs where the product's *accomplished* (the outcome as
  the evaluators decide it without the checker: ``run_outcome(use_checker=False)``, as the
  metrics' outcome precision reads it; unknown counts as not accomplished, as everywhere) says
  what the checker says; ``outcome_unknown`` counts the runs it could not decide;
- tokens in and out per run and seconds per run (from the run's start to its end), and the mean
  score beside them.
"""

import json
from pathlib import Path

from django.utils import timezone

from feedback.datasets.checkers import checker_verdict
from feedback.evaluation.chain import run_outcome, verdict_rows
from feedback.metrics.counts import run_error_counts
from feedback.models import Experiment, Run, Strategy

PHASES = {
    "baseline": "baseline (mining split, production)",
    "before": "held-out, before",
    "after": "held-out, after",
}
END_TEXT = {
    "promoted": "promoted: its experiment says promote",
    "rejected": "rejected: its experiment says reject",
    "not_promoted": "not promoted: its experiment did not say promote (left in its experiment stage for a reviewer)",
    "refused": "not promoted: the service refused",
    "revised": "revised: one kind of it alone said promote, so that version was tested (below)",
}


def new_report(*, model: str, families: list[str], reviewer: str, options: dict, live_at_start: list[dict]) -> dict:
    return {
        "model": model,
        "started_at": timezone.now().isoformat(),
        "finished_at": None,
        "families": families,
        "reviewer": reviewer,
        "options": options,
        "live_at_start": live_at_start,
        "stages": [],
        "stopped_experiments": [],
        "runs": {},
        "figures": {},
        "proposed": [],
        "picked": [],
        "kind_experiments": [],
        "stopped": None,
    }


def run_line(run: Run) -> str:
    """One run in a progress line: its status, the checker's verdict, tokens."""
    verdict = checker_verdict(run)
    check = "no answer" if verdict is None else ("correct" if verdict.passed else "wrong")
    return (
        f"run #{run.pk}: {run.get_status_display().lower()}, checker {check}, outcome {run.outcome}, "
        f"tokens {run.tokens_in}/{run.tokens_out}"
    )


def phase_figures(run_ids: list[int]) -> dict:
    """The figures of these runs (module docstring)."""
    runs = list(Run.objects.filter(pk__in=run_ids).select_related("task", "dataset_item").order_by("pk"))
    rows = verdict_rows([run.pk for run in runs])
    errors = run_error_counts([run.pk for run in runs])
    n = len(runs)
    correct = agrees = unknown = 0
    seconds, scores = [], []
    for run in runs:
        verdict = checker_verdict(run)
        passed = bool(verdict is not None and verdict.passed)
        correct += passed
        outcome = run_outcome(run, rows.get(run.pk, []), use_checker=False)
        unknown += outcome == Run.Outcome.UNKNOWN
        agrees += (outcome == Run.Outcome.ACCOMPLISHED) == passed
        if run.started_at and run.finished_at:
            seconds.append((run.finished_at - run.started_at).total_seconds())
        if run.score is not None:
            scores.append(run.score)
    repeated = sum(e["repeated_errors"] for e in errors.values())
    return {
        "runs": n,
        "strict_correct": correct,
        "strict_correct_rate": _rate(correct, n),
        "errors_per_run": _rate(sum(e["errors"] for e in errors.values()), n),
        "repeated_errors": repeated,
        "repeated_errors_per_run": _rate(repeated, n),
        "tokens_in_per_run": _rate(sum(r.tokens_in for r in runs), n),
        "tokens_out_per_run": _rate(sum(r.tokens_out for r in runs), n),
        "seconds_per_run": _rate(sum(seconds), len(seconds)),
        "mean_score": _rate(sum(scores), len(scores)),
        "accomplished_agrees": agrees,
        "agreement_rate": _rate(agrees, n),
        "outcome_unknown": unknown,
        # What the runs ran on: a worker of another configuration could have taken a queued one.
        "models": sorted({run.model_name or run.llm_backend or "—" for run in runs}),
    }


def _rate(part: float, whole: int) -> float | None:
    return part / whole if whole else None


def add_figures(report: dict, phase: str) -> None:
    """The phase's figures per family and overall, from the runs the report lists for it."""
    by_family = report["runs"].get(phase, {})
    figures = {family: phase_figures(ids) for family, ids in by_family.items()}
    figures["overall"] = phase_figures([pk for ids in by_family.values() for pk in ids])
    report["figures"][phase] = figures


def strategy_row(strategy: Strategy) -> dict:
    version = strategy.current_version
    return {
        "strategy": strategy.pk,
        "title": strategy.title,
        "pattern_kind": strategy.pattern_kind,
        "status": strategy.status,
        "support": strategy.support,
        "guidance": bool(version and version.new_guidance.strip()),
        "examples": bool(version and version.worked_example.strip()),
        "guardrails": len(version.guardrails) if version else 0,
    }


def experiment_row(experiment: Experiment) -> dict:
    """An ended experiment's decision and the figures it froze with it."""
    verdict = experiment.verdict or {}
    return {
        "experiment": experiment.pk,
        "decision": experiment.decision,
        **{key: verdict.get(key) for key in ("pairs", "wins", "losses", "ties", "difference", "low", "high")},
        "arms": verdict.get("arms", {}),
    }


def experiment_text(row: dict) -> str:
    interval = "" if row.get("low") is None else f", interval {row['low']:+.3f} to {row['high']:+.3f}"
    figures = f"{row['pairs']} pairs: {row['wins']} wins, {row['losses']} losses, {row['ties']} ties{interval}"
    return f"experiment #{row['experiment']} says {row['decision']} ({figures})"


def _cell(value) -> str:
    if value is None:
        return "—"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


COLUMNS = (
    ("runs", "runs"),
    ("strict_correct_rate", "strict correct"),
    ("repeated_errors_per_run", "repeated errors / run"),
    ("errors_per_run", "errors / run"),
    ("tokens_in_per_run", "tokens in / run"),
    ("tokens_out_per_run", "tokens out / run"),
    ("seconds_per_run", "seconds / run"),
    ("agreement_rate", "accomplished agrees"),
    ("mean_score", "mean score"),
)


def markdown(report: dict) -> str:
    """The report as markdown: the before / after table, then the experiments and what followed."""
    lines = [
        "# The learning cycle",
        "",
        f"Model: {report['model']}. Families: {', '.join(report['families'])}. Reviewer: "
        f"{report['reviewer'] or 'none'}. Started {report['started_at']}, finished {report['finished_at'] or '—'}.",
        f"Options: `{json.dumps(report['options'], sort_keys=True)}`.",
        "",
        "| family | phase | " + " | ".join(label for _, label in COLUMNS) + " |",
        "|---|---|" + "---:|" * len(COLUMNS),
    ]
    for family in [*report["families"], "overall"]:
        for phase, label in PHASES.items():
            figures = report["figures"].get(phase, {}).get(family)
            if figures is not None:
                cells = " | ".join(_cell(figures[key]) for key, _ in COLUMNS)
                lines.append(f"| {family} | {label} | {cells} |")
    models = sorted({m for phase in report["figures"].values() for f in phase.values() for m in f["models"]})
    lines += ["", f"The runs above ran on: {', '.join(models) or '—'}."]
    lines += ["", "## Experiments on the held-out items", ""]
    lines += [
        "| family | change | decision | pairs (wins / losses / ties) | difference | interval | then |",
        "|---|---|---|---|---:|---|---|",
    ]
    for row in report["picked"]:
        lines.append(_experiment_line(row, f"#{row['strategy']} {row['title']}", END_TEXT.get(row.get("end"), "—")))
    for row in report["kind_experiments"]:
        then = (
            "nothing of that kind to measure"
            if row.get("experiment") is None
            else "the pick was revised to it"
            if row.get("revised")
            else "measured only (no strategy acts on it)"
        )
        lines.append(_experiment_line(row, f"{row['kind']} of #{', #'.join(map(str, row['strategies']))}", then))
    if not report["picked"]:
        lines.append("| — | none picked | — | — | — | — | — |")
    if report["stopped"]:
        lines += ["", f"Stopped: {report['stopped']}."]
    lines += [
        "",
        "Strict correct: the dataset's checker. Accomplished agrees: the product's outcome without the "
        "checker (unknown counts as not accomplished) against the checker. Held-out runs are measured apart "
        "from production (never mined); the experiments' runs are in no figure above.",
    ]
    return "\n".join(lines) + "\n"


def _experiment_line(row: dict, change: str, then: str) -> str:
    if row.get("experiment") is None:
        return f"| {row['family']} | {change} | {row.get('decision', '—')} | — | — | — | {then} |"
    interval = "—" if row.get("low") is None else f"{row['low']:+.3f} to {row['high']:+.3f}"
    counts = f"{row['pairs']} ({row['wins']} / {row['losses']} / {row['ties']})"
    return (
        f"| {row['family']} | {change} | {row['decision']} | {counts} | {_cell(row.get('difference'))} | "
        f"{interval} | {then} |"
    )


def save(report: dict, *, json_path: Path | None, markdown_path: Path | None) -> None:
    """Write the report (JSON) and its table (markdown), each whole or not at all."""
    for path, text in (
        (json_path, lambda: json.dumps(report, indent=2, default=str)),
        (markdown_path, lambda: markdown(report)),
    ):
        if path is None:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        partial.write_text(text(), encoding="utf-8")
        partial.replace(path)
