"""Trials that compare like with like (issue 23.3): each task's runs in one arm against the same
task's in the other, with the always-valid guarantee kept.

The simulations run the decision function of feedback/strategies/trials.py (``decide`` on the
strata of strata.py) directly, seeded, with a look every few runs as the trial page and beat's
check-trials look: a task mix like the issue's (a few tasks that nearly always succeed, the rest
that mostly fail), outcomes accomplished (1) or not (0)."""

import random
import statistics
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from feedback.models import AppliedStrategy, Run, Strategy
from feedback.strategies.sequential import Sample
from feedback.strategies.strata import stratify, task_template
from feedback.strategies.trials import decide, trial_stats

from .factories import make_run
from .test_strategy_lifecycle import make_strategy

MINIMUM = 10

# (weight, kind, accomplished rate without the strategy, with it): the "0.30 -> 0.45". Two
# tasks nearly always succeed; the strategy lifts the six that mostly fail by 0.2 each.
MIX = [
    (1, "file_analysis", p, p + lift)
    for p, lift in [(0.95, 0), (0.9, 0), (0.05, 0.2), (0.05, 0.2), (0.1, 0.2), (0.1, 0.2), (0.1, 0.2), (0.15, 0.2)]
]
# A long tail: 30 task templates of two kinds, Zipf-weighted, most seen a few times only.
_rates = random.Random(1)
TAIL = [
    (1 / (i + 1), ("arithmetic", "general")[i % 2], p, p)
    for i, p in enumerate(_rates.choice([0.05, 0.1, 0.3, 0.9, 0.95]) for _ in range(30))
]


def _no_effect(mix):
    return [(w, kind, p, p) for w, kind, p, _ in mix]


def _simulate(mix, *, trials: int, runs: int, seed: int, stratified: bool, every: int) -> list:
    """Each trial's first look that ends in promote or roll back: (runs so far, verdict), or None."""
    rng = random.Random(seed)
    weights = [w for w, *_ in mix]
    ends = []
    for _ in range(trials):
        leaves: dict = {}
        end = None
        for run in range(1, runs + 1):
            i = rng.choices(range(len(mix)), weights)[0]
            _, kind, control, treatment = mix[i]
            key = (kind, str(i)) if stratified else ("", "")
            t, c = leaves.setdefault(key, (Sample(), Sample()))
            if rng.random() < 0.5:
                t.add(float(rng.random() < treatment))
            else:
                c.add(float(rng.random() < control))
            if run % every == 0 and (verdict := decide(stratify(leaves))[1]) in ("promote", "roll_back"):
                end = (run, verdict)
                break
        ends.append(end)
    return ends


@pytest.fixture(autouse=True)
def _minimum(settings):
    settings.STRATEGY_TRIAL_MIN_SAMPLES = MINIMUM
    settings.STRATEGY_TRIAL_MIN_EFFECT = 0.1


@pytest.mark.parametrize(("mix", "seed"), [(MIX, 5), (TAIL, 6)], ids=["eight-tasks", "long-tail"])
def test_stratified_no_effect_trials_rarely_decide_whatever_the_horizon(mix, seed):
    # 400 A/A trials looked at every 5 runs up to 2,000 runs: a false decision at any look, ever.
    ends = _simulate(_no_effect(mix), trials=400, runs=2000, seed=seed, stratified=True, every=5)
    decided = [end for end in ends if end is not None]
    by_horizon = {h: sum(end[0] <= h for end in decided) / len(ends) for h in (200, 500, 2000)}
    assert by_horizon[2000] <= 0.05, by_horizon  # measured: 1.8%, 2.3%, 3.3% at 200, 500, 2,000 runs


def test_the_0_30_to_0_45_strategy_is_promoted_far_more_often_and_sooner():
    stratified = _simulate(MIX, trials=300, runs=600, seed=3, stratified=True, every=2)
    plain = _simulate(MIX, trials=300, runs=600, seed=3, stratified=False, every=2)

    def promoted_within(ends, runs):
        return sum(end is not None and end[1] == "promote" and end[0] <= runs for end in ends) / len(ends)

    # The plain difference of the arms (the trials before strata): about half within 300 runs.
    assert 0.4 < promoted_within(plain, 300) < 0.65
    assert promoted_within(stratified, 300) >= 0.7  # measured: 76% (the plain difference: 53%)
    assert promoted_within(stratified, 300) - promoted_within(plain, 300) >= 0.15
    medians = [statistics.median(end[0] for end in ends if end and end[1] == "promote") for ends in (stratified, plain)]
    assert medians[0] < 0.9 * medians[1]  # measured: 186 against 224
    assert not any(end and end[1] == "roll_back" for end in stratified)  # never backwards


def test_a_task_template_blanks_numbers_and_keeps_what_tells_tasks_apart():
    assert task_template("What is (12 + 7) * 3?") == task_template("what is  (40 + 2) * 9?") == "what is (# + #) * #?"
    assert task_template("Summarise report.txt") != task_template("Summarise release-notes.txt")
    assert task_template("Pay 1,200.50 now") == "pay # now"


def test_templates_with_one_arm_are_pooled_per_kind_then_together():
    def pair(t, c):
        a, b = Sample(), Sample()
        for v in t:
            a.add(v)
        for v in c:
            b.add(v)
        return a, b

    strata = stratify(
        {
            ("arithmetic", "a"): pair([1, 1], [0]),  # both arms: its own stratum
            ("arithmetic", "b"): pair([1], []),  # treatment only ...
            ("arithmetic", "c"): pair([], [0, 1]),  # ... and control only: pooled into arithmetic's rest
            ("general", "d"): pair([1], []),  # one-armed, alone in its kind: into the rest of all kinds
        }
    )
    shown = [(s.kind, s.template, s.treatment.n, s.control.n, s.templates) for s in strata]
    assert shown == [("arithmetic", "a", 2, 1, 1), ("arithmetic", "", 1, 2, 2), ("", "", 1, 0, 1)]
    assert [s.compared for s in strata] == [True, True, False]


def _trial(rows) -> Strategy:
    """A strategy on trial with a scored run per (arm, task text, score)."""
    strategy = make_strategy(status="trial")
    Strategy.objects.filter(pk=strategy.pk).update(trial_started_at=timezone.now() - timedelta(days=1))
    for arm, text, score in rows:
        run = make_run(status=Run.Status.SUCCEEDED, score=score, text=text, kind="file_analysis")
        AppliedStrategy.objects.create(run=run, strategy_version=strategy.current_version, arm=arm)
    strategy.refresh_from_db()
    return strategy


EASY, HARD = "Summarise report.txt and count its words", "Summarise release-notes.txt and count its words"


def _same_task_same_score(easy_treatment: int, hard_treatment: int, easy_control: int, hard_control: int):
    """The issue's trial: each task scores the same in both arms (0.97 and 0.27, give or take);
    the arms differ only in which tasks they happened to get."""
    rows = []
    for arm, easy, hard in (("treatment", easy_treatment, hard_treatment), ("control", easy_control, hard_control)):
        rows += [(arm, EASY, (0.95, 0.97, 0.99)[i % 3]) for i in range(easy)]
        rows += [(arm, HARD, (0.25, 0.27, 0.29)[i % 3]) for i in range(hard)]
    return _trial(rows)


@pytest.mark.django_db
def test_a_task_mix_that_fell_unevenly_is_not_an_effect(client, reviewer):
    s = _same_task_same_score(easy_treatment=30, hard_treatment=12, easy_control=12, hard_control=30)
    stats = trial_stats(s)
    assert stats.raw_difference == pytest.approx(0.30)  # the arms' means: the task mix
    assert abs(stats.difference) < 0.01 and stats.ci_low < 0 < stats.ci_high  # like with like: nothing
    assert stats.recommendation == "no_effect"  # the plain difference said "promote"
    assert [(x.template, x.treatment.n, x.control.n) for x in stats.strata] == [
        (task_template(EASY), 30, 12),
        (task_template(HARD), 12, 30),
    ]
    client.force_login(reviewer)
    html = client.get(reverse("feedback-strategy-detail", args=[s.pk])).content.decode()
    table = html[html.index('<table class="table" id="trial-strata">') :]
    table = table[: table.index("</table>")]
    assert f"<td>{task_template(EASY)}</td>" in table and "<td>30, 0.970</td><td>12, 0.970</td>" in table
    assert f"<td>{task_template(HARD)}</td>" in table and "<td>12, 0.270</td><td>30, 0.270</td>" in table
    assert "The arms' mean scores differ by 0.300 with their task mix as it fell" in html
    assert "like with like" in html


@pytest.mark.django_db
def test_a_real_effect_within_tasks_is_found_through_an_uneven_mix():
    # The hard task gains 0.45 with the strategy; the treatment happened to get more hard tasks, so
    # its mean is below the control's and the plain difference would have said nothing.
    rows = [("treatment", EASY, 0.97)] * 10 + [("treatment", HARD, (0.70, 0.72, 0.74)[i % 3]) for i in range(30)]
    rows += [("control", EASY, 0.97)] * 30 + [("control", HARD, (0.25, 0.27, 0.29)[i % 3]) for i in range(9)]
    stats = trial_stats(_trial(rows))
    assert stats.raw_difference < 0
    assert stats.recommendation == "promote" and stats.difference == pytest.approx(0.45 * 39 / 79, abs=0.01)


def test_equal_scores_summed_in_another_order_are_no_difference():
    # A deterministic model (the offline one) scores each task the same every time: no spread
    # within strata, and means that differ by the sums' rounding only. That is no effect, not harm.
    def repeated(value: float, n: int) -> Sample:
        sample = Sample()
        for _ in range(n):
            sample.add(value)
        return sample

    leaves = {
        ("arithmetic", "a"): (repeated(0.97, 25), repeated(0.97, 12)),
        ("arithmetic", "b"): (repeated(0.5, 12), repeated(0.5, 25)),
    }
    assert leaves["arithmetic", "a"][0].mean != leaves["arithmetic", "a"][1].mean  # the rounding
    # (before: an exact interval of -1.7e-16 on both sides, "roll back", as the demo loop did to a
    # strategy whose arithmetic answers scored the same in both arms)
    interval, recommendation = decide(stratify(leaves))
    assert (interval.low, interval.high, recommendation) == (0.0, 0.0, "no_effect")
