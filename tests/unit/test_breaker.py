"""The breaker's state is shared through the cache: another process sees it open."""

import subprocess
import sys

from django.conf import settings

from feedback.agent.breaker import CircuitBreaker

PROBE = """
import django; django.setup()
from feedback.agent.breaker import CircuitBreaker
b = CircuitBreaker("weather_api", failures=3, reset_seconds=30)
print(b.state(), b.failures())
"""


def _other_process_sees() -> str:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=settings.BASE_DIR, capture_output=True, text=True, check=True
    )
    return out.stdout.strip().splitlines()[-1]


def test_two_processes_share_one_breaker():
    breaker = CircuitBreaker("weather_api", failures=3, reset_seconds=30)
    breaker.record_failure()
    breaker.record_failure()
    assert _other_process_sees() == "closed 2"
    breaker.record_failure()
    assert breaker.is_open()
    assert _other_process_sees() == "open 3"
    breaker.record_success()
    assert _other_process_sees() == "closed 0"


def test_half_open_after_the_reset_period(monkeypatch):
    import time as real_time

    breaker = CircuitBreaker("flaky", failures=2, reset_seconds=10)
    breaker.record_failure()
    breaker.record_failure()
    assert breaker.state() == "open" and not breaker.allow()
    now = real_time.time()
    monkeypatch.setattr("feedback.agent.breaker.time.time", lambda: now + 11)
    assert breaker.state() == "half-open" and breaker.allow()
    breaker.record_failure()  # the trial call failed: open again at once
    monkeypatch.setattr("feedback.agent.breaker.time.time", lambda: now + 12)
    assert breaker.state() == "open"


def _mget_calls() -> int:
    from django.core.cache import cache

    client = cache._cache.get_client(write=True)
    return int(client.info("commandstats").get("cmdstat_mget", {}).get("calls", 0))


def test_this_process_sees_its_own_change_at_once():
    breaker = CircuitBreaker("flaky", failures=2, reset_seconds=30)
    assert breaker.state() == "closed"
    breaker.record_failure()
    assert breaker.failures() == 1
    breaker.record_failure()
    assert breaker.is_open()
    breaker.record_success()
    assert breaker.state() == "closed"
