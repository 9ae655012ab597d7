"""What the demo loop reports, as data: which strategies were live in each phase, how each trial
ended, the figures. The strategies page renders it with a template (translated); the management
command prints it as text. Nothing in it is prose: labels are chosen where it is shown."""

from datetime import datetime

from django.core.cache import cache
from django.db.models import Count, Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from feedback.models import AppliedStrategy, Strategy

from .trials import TrialStats

DEMO_REPORT_KEY = "demo-loop:report"
DEMO_REPORT_SECONDS = 7 * 24 * 3600

# The figures of each phase (demo.Phase.figures), in the page's words.
FIGURE_LABELS = {
    "runs": _("runs"),
    "average score": _("average score"),
    "accomplished rate": _("accomplished rate"),
    "errors per run": _("errors per run"),
    "repeated-error rate": _("repeated-error rate"),
    "repeated errors per run": _("repeated errors per run"),
    "intervention rate": _("intervention rate"),
    "strict correct rate": _("strict correct rate"),
    "seconds per run": _("seconds per run"),
}
# How a trial of the demo loop ended.
ENDS = {
    "promoted": _("promoted: its test said promote"),
    "rolled_back": _("rolled back: its test said so"),
    "auto_rolled_back": _("rolled back automatically: significantly worse"),
    "undecided": _("undecided: left on trial"),
}


def keep(report: dict, *, started: datetime) -> None:
    """Keep the report for the strategies page (the embedded default's cache is a file, shared by
    the web server, the worker and this command)."""
    cache.set(DEMO_REPORT_KEY, {**report, "started_at": started, "finished_at": timezone.now()}, DEMO_REPORT_SECONDS)


def live_in(run_ids: list[int]) -> list[dict]:
    """The strategies applied to (or, in a trial's control arm, withheld from) these runs, with
    how many runs in each arm: what was live while they ran."""
    rows = (
        AppliedStrategy.objects.filter(run_id__in=run_ids)
        .values("strategy_version__strategy", "strategy_version__strategy__title")
        .annotate(
            active=Count("id", filter=Q(arm=AppliedStrategy.Arm.ACTIVE)),
            treatment=Count("id", filter=Q(arm=AppliedStrategy.Arm.TREATMENT)),
            control=Count("id", filter=Q(arm=AppliedStrategy.Arm.CONTROL)),
        )
        .order_by("strategy_version__strategy")
    )
    return [
        {
            "strategy": row["strategy_version__strategy"],
            "title": row["strategy_version__strategy__title"],
            "active": row["active"],
            "treatment": row["treatment"],
            "control": row["control"],
        }
        for row in rows
    ]


def live_now() -> list[dict]:
    """The strategies live at this moment (active or on trial)."""
    live = Strategy.objects.filter(status__in=[Strategy.Status.ACTIVE, Strategy.Status.TRIAL]).order_by("pk")
    return [{"strategy": s.pk, "title": s.title, "status": s.status} for s in live]


def decision(strategy: Strategy, stats: TrialStats, end: str) -> dict:
    """One trial's end with the figures it was decided on."""
    return {
        "strategy": strategy.pk,
        "title": strategy.title,
        "end": end,
        "recommendation": stats.recommendation,
        "assigned": stats.split.treatment + stats.split.control,
        "treatment_n": stats.treatment.n,
        "control_n": stats.control.n,
        "difference": stats.difference,
        "ci_low": stats.ci_low,
        "ci_high": stats.ci_high,
        "blockers": list(stats.blockers),
    }


def live_text(live: list[dict]) -> str:
    if not live:
        return "no live strategy"
    parts = []
    for row in live:
        arms = [f"{row[arm]} {arm}" for arm in ("active", "treatment", "control") if row.get(arm)]
        parts.append(f"#{row['strategy']} ({', '.join(arms) or row.get('status', '')})")
    return "live: " + "; ".join(parts)


def decision_text(row: dict) -> str:
    interval = "" if row["ci_low"] is None else f", interval {row['ci_low']:+.3f} to {row['ci_high']:+.3f}"
    figures = f"n={row['treatment_n']}/{row['control_n']}, difference {row['difference'] or 0:+.3f}{interval}"
    if row["end"] == "undecided":
        return (
            f"  undecided after {row['assigned']} runs  #{row['strategy']} {row['title']} "
            f"({row['recommendation'].replace('_', ' ')}; {figures}; left on trial)"
        )
    end = row["end"].replace("_", " ")
    return f"  {end:<16} #{row['strategy']} {row['title']} ({row['recommendation']}; {figures})"


def experiment_text(row: dict) -> str:
    """One experiment of the demo's experiment stage, in words."""
    if row["experiment"] is None:
        return "no dataset: straight to trial"
    interval = "" if row.get("low") is None else f", interval {row['low']:+.3f} to {row['high']:+.3f}"
    figures = f"{row['pairs']} pairs: {row['wins']} wins, {row['losses']} losses, {row['ties']} ties{interval}"
    then = {"promote": "on to trial", "reject": "rejected", "undecided": "undecided, on to trial"}[row["decision"]]
    return f"experiment #{row['experiment']} says {row['decision']} ({figures}); {then}"


def format_figures(figures: dict) -> str:
    names = list(figures)
    rows = [f"{'':<26}" + "".join(f"{n:>12}" for n in names)]
    for key in figures[names[0]]:
        cells = []
        for n in names:
            value = figures[n][key]
            cells.append("—" if value is None else (f"{value:.3f}" if isinstance(value, float) else str(value)))
        rows.append(f"{key:<26}" + "".join(f"{c:>12}" for c in cells))
    return "\n".join(rows)


def figure_rows(figures: dict) -> list[dict]:
    """The figures table for the page: one row per figure, its label and each phase's value."""
    phases = list(figures)
    return [
        {"key": key, "label": FIGURE_LABELS.get(key, key), "values": [figures[p][key] for p in phases]}
        for key in (figures[phases[0]] if phases else {})
    ]
