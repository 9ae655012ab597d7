"""Year-long per-tool stats on the metrics page: computed once, shared, never stampeded."""

import threading

import pytest
from django.core.cache import cache
from django.urls import reverse

from feedback import metrics
from feedback.views import metrics as metrics_view

pytestmark = pytest.mark.django_db


def test_long_windows_compute_tool_stats_once(client, operator, monkeypatch):
    calls = []
    real = metrics.tool_stats
    monkeypatch.setattr(metrics, "tool_stats", lambda window: calls.append(window) or real(window))
    client.force_login(operator)
    for _ in range(2):
        assert client.get(reverse("feedback-metrics"), {"days": 365}).status_code == 200
    assert len(calls) == 1
    client.get(reverse("feedback-metrics"), {"days": 30})
    client.get(reverse("feedback-metrics"), {"days": 30})
    assert len(calls) == 3  # short windows stay live


def test_while_another_request_computes_them_a_request_waits_for_its_result(monkeypatch):
    monkeypatch.setattr(metrics, "tool_stats", lambda window: pytest.fail("computed twice"))
    cache.add("tools-test:computing", 1)  # another request is computing
    threading.Timer(0.2, lambda: cache.set("tools-test", [{"tool_name": "calculator"}])).start()
    assert metrics_view._cached_tool_stats(metrics.Window.last(365), "tools-test") == [{"tool_name": "calculator"}]
