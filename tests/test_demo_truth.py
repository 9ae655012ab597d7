"""The demo loop tells the truth (issue 23.8): its baseline says which strategies were live, a trial
ends by its test's verdict or is reported undecided (never rolled back as if by a result at its
run cap), and its report is a page rendered from data, in the reader's language."""

import pytest
from django.core.cache import cache
from django.urls import reverse
from django.utils import timezone

from feedback.models import AppliedStrategy, Run, Strategy, Task
from feedback.strategies import demo, demo_report

from .factories import make_run
from .test_strategy_lifecycle import make_strategy

pytestmark = pytest.mark.django_db


def test_the_baseline_says_which_strategies_were_live_in_it(settings):
    settings.STRATEGY_TRIAL_MIN_SAMPLES = 8
    # Left active by an earlier loop: it applies to every file-analysis task of the baseline.
    left = make_strategy(status="active")
    lines: list[str] = []
    report = demo.run_demo_loop(tasks_per_phase=30, seed=7, out=lines.append)
    assert report["live_at_start"] == [{"strategy": left.pk, "title": left.title, "status": "active"}]
    before = report["phases"]["before"]
    applied = AppliedStrategy.objects.filter(run__task__kind=Task.Kind.FILE_ANALYSIS, strategy_version__strategy=left)
    assert before["live"] == [
        {"strategy": left.pk, "title": left.title, "active": applied.count(), "treatment": 0, "control": 0}
    ]
    assert applied.count() > 0
    text = "\n".join(lines)
    assert f"the baseline (live: #{left.pk} (active) at its start)" in text
    assert f"strategies live in them: live: #{left.pk} ({applied.count()} active)" in text
    assert "no live strategy" not in text


def test_a_leading_trial_at_its_run_cap_is_reported_undecided_and_left_on_trial(reviewer, settings):
    settings.STRATEGY_TRIAL_MIN_SAMPLES = 10
    s = make_strategy(status="trial")
    for arm, scores in (("treatment", [0.9, 0.6, 0.8]), ("control", [0.5, 0.7, 0.4])):  # leading, undecided
        for score in scores:
            run = make_run(status=Run.Status.SUCCEEDED, score=score)
            AppliedStrategy.objects.create(run=run, strategy_version=s.current_version, arm=arm)
    [row] = demo._end_trials([s.pk], [], reviewer)
    s.refresh_from_db()
    assert s.status == "trial" and not s.events.exists()  # nothing rolled back "as if by result"
    assert (row["end"], row["recommendation"], row["assigned"]) == ("undecided", "collect_more", 6)
    assert row["difference"] > 0
    assert demo_report.decision_text(row).startswith(f"  undecided after 6 runs  #{s.pk} ")


def test_the_loop_ends_trials_by_their_verdicts_only(settings):
    settings.STRATEGY_TRIAL_MIN_SAMPLES = 8
    report = demo.run_demo_loop(
        tasks_per_phase=40, seed=7, auto_approve=True, trial_batch=20, trial_limit=40, out=lambda line: None
    )
    # proposed -> experiment -> trial: each proposal's experiment decided whether it went to trial.
    stage = report["experiment"]
    assert stage["available"] is True and stage["experiments"]
    trialled = {row["strategy"] for row in report["decisions"]}
    for row in stage["experiments"]:
        status = Strategy.objects.get(pk=row["strategy"]).status
        if row["decision"] == "reject":
            assert status == "rejected" and row["strategy"] not in trialled, row
        else:
            assert row["strategy"] in trialled, row
        if row["experiment"]:
            assert row["wins"] + row["losses"] + row["ties"] == row["pairs"], row
    assert report["decisions"]
    # (end, the status it leaves, the verdicts it may follow)
    rules = {
        "promoted": ("active", {"promote"}),
        "rolled_back": ("rolled_back", {"no_effect", "roll_back"}),
        "auto_rolled_back": ("rolled_back", {"roll_back"}),
        "undecided": ("trial", {"collect_more", "blocked", "check_split"}),
    }
    for row in report["decisions"]:
        status, verdicts = rules[row["end"]]
        assert Strategy.objects.get(pk=row["strategy"]).status == status, row
        assert row["recommendation"] in verdicts, row
    # 40 trial runs cannot decide every trial: some are reported undecided, and stay on trial.
    assert any(row["end"] == "undecided" for row in report["decisions"])
    # What stayed live after the decisions is in the "after" phase's record.
    after_live = {row["strategy"] for row in report["phases"]["after"]["live"]}
    assert after_live <= set(Strategy.objects.filter(status__in=["active", "trial"]).values_list("pk", flat=True))


def test_the_report_is_data_rendered_in_the_reader_s_language(client, operator, settings):
    report = {
        "model": "Offline demo model (rule-based, no LLM)",
        "tasks_per_phase": 30,
        "seed": 7,
        "auto_approve": True,
        "live_at_start": [],
        "proposed": [
            {"strategy": 3, "title": "Look in sub-folders <b>", "pattern_kind": "x", "support": 4, "guardrails": 1}
        ],
        "phases": {
            "before": {"runs": 30, "live": []},
            "trial": {
                "runs": 40,
                "live": [
                    {"strategy": 3, "title": "Look in sub-folders <b>", "active": 0, "treatment": 21, "control": 19}
                ],
            },
            "after": {"runs": 30, "live": []},
        },
        "figures": {
            "before": {"runs": 30, "average score": 0.7},
            "trial": {"runs": 40, "average score": 0.71},
            "after": {"runs": 30, "average score": 0.72},
        },
        "experiment": {
            "available": True,
            "strategies": [3],
            "experiments": [
                {"strategy": 3, "experiment": None, "decision": "no_dataset"},
            ],
        },
        "trial_limit": 40,
        "decisions": [
            {
                "strategy": 3,
                "title": "Look in sub-folders <b>",
                "end": "undecided",
                "recommendation": "collect_more",
                "assigned": 40,
                "treatment_n": 21,
                "control_n": 19,
                "difference": 0.12,
                "ci_low": -0.2,
                "ci_high": 0.4,
                "blockers": [],
            }
        ],
    }
    demo_report.keep(report, started=timezone.now())
    stored = cache.get(demo_report.DEMO_REPORT_KEY)
    assert isinstance(stored, dict) and stored["decisions"][0]["end"] == "undecided"  # data, not a text blob
    client.force_login(operator)
    html = client.get(reverse("feedback-strategies-demo-report")).content.decode()
    assert '<tr id="demo-phase-before"><td>baseline</td><td>30</td>' in html and "no live strategy" in html
    assert "<strong>undecided after 40 runs</strong> (collect_more; left on trial)" in html
    assert "Look in sub-folders &lt;b&gt;" in html and "<b>" not in html.split('id="demo-report"')[1]
    assert "verdict decided whether it went on to trial" in html
    assert '<tr id="demo-experiment-3">' in html and "no dataset: straight to trial" in html
    assert "<td>average score</td><td>0.700</td><td>0.710</td><td>0.720</td>" in html
    # In Chinese, the page's own words are Chinese.
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = "zh-hans"
    chinese = client.get(reverse("feedback-strategies-demo-report")).content.decode()
    assert "演示循环的报告" in chinese and "基线" in chinese and "运行 40 次后仍未定" in chinese
