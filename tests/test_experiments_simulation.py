"""Paired experiments, simulated (seeded): false decisions on A/A at every horizon.

The power target (a change turning 15% of the items from failed to accomplished promoted within
60 items in 80% of simulations) is not met by this test yet: 64% (200 simulations, none
rejected). It is measured in the work's closing note and stays the next step, not a lowered bar.
"""

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


def test_a_a_experiments_decide_in_at_most_5_percent():
    rng = random.Random(7)
    for horizon, sims in ((200, 200), (1000, 40)):
        decided = sum(_decided_within(_aa(rng, horizon), horizon) is not None for _ in range(sims))
        print(f"A/A decided within {horizon}: {decided}/{sims}")
        assert decided / sims <= 0.05
