"""The breaker's state is shared through the cache: another process sees it open."""

import subprocess
import sys
import time

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


def test_a_healthy_breaker_is_read_from_memory_until_another_process_changes_it():
    breaker = CircuitBreaker("weather_api", failures=3, reset_seconds=30)
    assert breaker.state() == "closed"
    before = _mget_calls()
    for _ in range(20):
        assert breaker.state() == "closed"
    # Twenty reads of an unchanged breaker, not one round trip to Redis.
    assert _mget_calls() == before
    # Another worker process trips it: Redis invalidates this process's copy, and the very
    # next read here sees the breaker open.
    subprocess.run(
        [sys.executable, "-c", OPEN_ELSEWHERE], cwd=settings.BASE_DIR, capture_output=True, text=True, check=True
    )
    assert breaker.state() == "open"
    assert breaker.failures() == 3
    # The other process's success closes it again, seen here at once too.
    subprocess.run(
        [sys.executable, "-c", CLOSE_ELSEWHERE], cwd=settings.BASE_DIR, capture_output=True, text=True, check=True
    )
    assert breaker.state() == "closed" and breaker.failures() == 0


OPEN_ELSEWHERE = """
import django; django.setup()
from feedback.agent.breaker import CircuitBreaker
b = CircuitBreaker("weather_api", failures=3, reset_seconds=30)
for _ in range(3):
    b.record_failure()
"""
CLOSE_ELSEWHERE = OPEN_ELSEWHERE.replace("for _ in range(3):\n    b.record_failure()", "b.record_success()")


def test_this_process_sees_its_own_change_at_once():
    breaker = CircuitBreaker("flaky", failures=2, reset_seconds=30)
    assert breaker.state() == "closed"
    breaker.record_failure()
    assert breaker.failures() == 1
    breaker.record_failure()
    assert breaker.is_open()
    breaker.record_success()
    assert breaker.state() == "closed"


def test_a_lost_tracking_connection_is_never_trusted():
    """If Redis drops the connection that receives the invalidations, what was kept in memory
    is dropped with it: a change made meanwhile is still seen."""
    from django.core.cache import cache

    breaker = CircuitBreaker("search", failures=1, reset_seconds=30)
    assert breaker.state() == "closed"
    admin = cache._cache.get_client(write=True)
    tracking = [c for c in admin.client_list() if "tracking" in c.get("flags", "") or c.get("flags") == "t"]
    assert tracking, "the breaker's reads go through a tracking connection"
    for client in tracking:
        admin.client_kill_filter(_id=client["id"])
    # Written behind the killed connection's back: no invalidation can reach it.
    cache.set(breaker._open_key, time.time() + 30, timeout=30)
    cache.set(breaker._failures_key, 1, timeout=30)
    assert breaker.state() == "open"
    # And the next read goes through a fresh tracking connection again.
    assert breaker.state() == "open"


def test_a_flushed_cache_empties_the_copy():
    from django.core.cache import cache

    breaker = CircuitBreaker("search", failures=1, reset_seconds=30)
    breaker.record_failure()
    assert breaker.is_open()
    cache._cache.get_client(write=True).flushdb()  # not through this cache object: Redis tells it
    time.sleep(0.05)
    assert breaker.state() == "closed"
