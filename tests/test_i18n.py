"""English and Simplified Chinese: the switcher, and translations that actually load."""

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db


def test_the_language_switcher_turns_the_interface_into_simplified_chinese(client, reviewer):
    client.force_login(reviewer)
    html = client.get(reverse("feedback-run-list")).content.decode()
    assert 'action="/i18n/setlang/"' in html and "简体中文" in html
    response = client.post(reverse("set_language"), {"language": "zh-hans", "next": reverse("feedback-run-list")})
    assert response.status_code == 302
    html = client.get(reverse("feedback-run-list")).content.decode()
    assert '<html lang="zh-hans">' in html
    for word in ("运行", "评审队列", "指标", "策略", "退出登录", "还没有运行。"):
        assert word in html, word


def test_the_switcher_works_before_logging_in(client):
    response = client.post(reverse("set_language"), {"language": "zh-hans", "next": "/accounts/login/"})
    assert response.status_code == 302 and response["Location"] == "/accounts/login/"
    assert "用户名" in client.get("/accounts/login/").content.decode()


def test_every_message_has_a_chinese_translation():
    from pathlib import Path

    po = (Path(__file__).parent.parent / "locale/zh_Hans/LC_MESSAGES/django.po").read_text(encoding="utf-8")
    # The header is the one entry with an empty msgid and msgstr.
    assert po.count('\nmsgstr ""\n"') == 1 and 'msgstr ""\n\n' not in po and "#, fuzzy" not in po
    assert (Path(__file__).parent.parent / "locale/zh_Hans/LC_MESSAGES/django.mo").exists()


def test_the_metrics_charts_are_labelled_in_the_page_language(client, reviewer):
    import json
    import re

    from django.conf import settings

    client.force_login(reviewer)

    def chart_text() -> dict:
        html = client.get(reverse("feedback-metrics")).content.decode()
        found = re.search(r'<script id="metrics-data" type="application/json">(.*?)</script>', html, re.S)
        return json.loads(found.group(1))["text"]

    assert chart_text()["intervention_rate"] == "Human-intervention rate (%)"
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = "zh-hans"
    text = chart_text()
    assert text["intervention_rate"] == "人工干预率（%）"
    assert text["p95"] == "p95（毫秒，估算）" and text["ms"] == "毫秒"


def test_plan_statuses_are_words_of_the_page_not_stored_codes(client, reviewer):
    from feedback.agent.tools.engine import PLAN_STATUSES
    from feedback.templatetags.trace_format import PLAN_STATUS_LABELS

    from .factories import make_run

    assert set(PLAN_STATUS_LABELS) == set(PLAN_STATUSES)  # every status the plan tool stores has its words
    plan = [{"title": f"Step {status}", "status": status} for status in PLAN_STATUSES]
    run = make_run(status="running", plan=plan)
    client.force_login(reviewer)
    html = client.get(reverse("feedback-run-detail", args=[run.pk])).content.decode()
    for code, words in (("pending", "pending"), ("in_progress", "in progress"), ("completed", "completed")):
        assert f'<li class="plan-{code}"><span class="badge">{words}</span> Step {code}</li>' in html
    assert '<span class="badge">in_progress</span>' not in html
