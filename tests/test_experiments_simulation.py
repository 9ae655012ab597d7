"""Paired experiments, simulated (seeded): power on a 15% fix, false decisions on A/A at every
horizon, and a change that breaks items rejected."""

import random

from feedback.experiments.paired import paired_verdict


def _decided_within(differences: list[float], horizon: int) -> str | None:
    for n in range(1, horizon + 1):
        decision = paired_verdict(differences[:n]).decision
        if decision != "continue":
            return decision
    return None


def _aa(rng: random.Random, n: int) -> list[float]:
    out = []
    for _ in range(n):
        p = rng.random()  # each item its own difficulty, both arms the same
        out.append(float(rng.random() < p) - float(rng.random() < p))
    return out


def _fix(rng: random.Random, n: int) -> list[float]:
    return [1.0 if rng.random() < 0.15 else 0.0 for _ in range(n)]  # 15% failed -> accomplished


def test_a_15_percent_fix_is_promoted_within_60_items_in_80_percent():
    rng = random.Random(23)
    decisions = [_decided_within(_fix(rng, 60), 60) for _ in range(1000)]
    rate = decisions.count("promote") / len(decisions)
    print(f"promoted within 60 items: {rate:.1%}")
    assert "reject" not in decisions
    assert rate >= 0.8


def test_a_change_that_breaks_items_is_rejected_not_promoted():
    rng = random.Random(5)
    decisions = [_decided_within([-d for d in _fix(rng, 100)], 100) for _ in range(300)]
    assert "promote" not in decisions and decisions.count("reject") / len(decisions) >= 0.9


def test_a_a_experiments_decide_in_at_most_5_percent():
    rng = random.Random(7)
    for horizon, sims in ((200, 200), (1000, 40)):
        decided = sum(_decided_within(_aa(rng, horizon), horizon) is not None for _ in range(sims))
        print(f"A/A decided within {horizon}: {decided}/{sims}")
        assert decided / sims <= 0.05
