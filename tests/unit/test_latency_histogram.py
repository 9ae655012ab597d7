"""The latency histogram behind the per-tool percentiles (hypothesis): log-scale buckets of
``duration_ms`` 5% wide, and p50/p95 estimated from them within 5% of ``percentile_cont``."""

import math
import random
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from feedback.metrics.tools import histogram_percentile, latency_bounds, latency_bucket, percentile_cont

DURATIONS = st.integers(min_value=0, max_value=2**31 - 1)  # duration_ms is a PositiveIntegerField
FRACTIONS = st.sampled_from([0.0, 0.05, 0.5, 0.9, 0.95, 0.99, 1.0]) | st.floats(min_value=0, max_value=1)


def histogram(durations: list[int]) -> dict[int, int]:
    return Counter(latency_bucket(ms) for ms in durations)


@given(DURATIONS, DURATIONS)
def test_buckets_are_monotone(a, b):
    low, high = sorted((a, b))
    assert latency_bucket(low) <= latency_bucket(high)


@given(DURATIONS)
def test_a_duration_lies_in_its_buckets_bounds_and_a_bucket_is_under_5_percent_wide(ms):
    bucket = latency_bucket(ms)
    shortest, longest = latency_bounds(bucket)
    assert shortest <= ms <= longest
    assert longest - shortest < 0.05 * max(shortest, 1)
    # The bounds are tight: the whole durations just outside belong to the neighbouring buckets.
    assert shortest == 0 or latency_bucket(shortest - 1) < bucket
    assert latency_bucket(longest + 1) > bucket


def test_the_buckets_edges_are_the_powers_of_the_base():
    assert [latency_bucket(ms) for ms in (0, 1, 2, 20, 21)] == [0, 1, 15, 62, 63]
    for bucket in (66, 100, 300, 441):
        assert latency_bounds(bucket) == (math.ceil(1.05 ** (bucket - 1)), math.ceil(1.05**bucket) - 1)


@settings(max_examples=300)
@given(st.lists(DURATIONS, min_size=1, max_size=300), FRACTIONS)
def test_the_percentile_estimate_is_within_5_percent(durations, fraction):
    exact = percentile_cont(durations, fraction)
    estimate = histogram_percentile(histogram(durations), fraction)
    assert abs(estimate - exact) <= 0.05 * exact + 1e-6 * max(exact, 1)


@given(st.lists(st.integers(min_value=0, max_value=20), min_size=1, max_size=100), FRACTIONS)
def test_below_20_ms_the_estimate_is_exact(durations, fraction):
    estimate = histogram_percentile(histogram(durations), fraction)
    assert math.isclose(estimate, percentile_cont(durations, fraction), abs_tol=1e-9)


def test_known_distributions():
    rng = random.Random(7)
    samples = {
        "lognormal": [int(rng.lognormvariate(4, 1)) + 1 for _ in range(5000)],  # as bench/history.py
        "uniform": [rng.randint(100, 5000) for _ in range(5000)],
        "two modes": [rng.choice((rng.randint(5, 15), rng.randint(2000, 3000))) for _ in range(5000)],
    }
    for name, durations in samples.items():
        for fraction in (0.5, 0.95):
            exact = percentile_cont(durations, fraction)
            estimate = histogram_percentile(histogram(durations), fraction)
            # Well inside the bound: the calls of a bucket spread evenly over its width.
            assert abs(estimate - exact) <= 0.02 * exact, (name, fraction, estimate, exact)


def test_histograms_add_up_like_the_durations_they_count():
    first, second = [3, 50, 400, 9000], [7, 51, 52, 1200]
    merged = histogram(first) + histogram(second)
    assert merged == histogram(first + second)
    assert histogram_percentile(merged, 0.5) == histogram_percentile(histogram(first + second), 0.5)


def test_an_empty_histogram_has_no_percentile():
    assert histogram_percentile({}, 0.5) is None
    assert histogram_percentile({12: 0}, 0.95) is None
