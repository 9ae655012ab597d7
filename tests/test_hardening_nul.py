"""Issue 22, point 6: a strategy edit whose JSON holds ``\\u0000`` was a 500 on PostgreSQL.

JSON text may write a NUL character (``"\\u0000"``) or half a UTF-16 pair (``"\\ud800"``); both
decode to a Python string that PostgreSQL refuses in jsonb and text. Every JSON field people edit
refuses them with a field error (feedback/storable.py), and nothing is stored. On PostgreSQL,
where the old code answered 500.
"""

import json

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from feedback.models import EvaluationProfile, McpServer, McpToolOverride, Strategy, StrategyVersion, ToolSetting
from feedback.strategies import services
from feedback.strategies.proposals import mine_and_propose

from .test_hardening_regex import admin_save, superuser  # noqa: F401 (a fixture)
from .test_strategy_proposals import leaky_history

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db]

NUL = "\x00"
SURROGATE = "\ud800"


def _proposed() -> Strategy:
    strategy = Strategy.objects.create(title="A lesson", pattern_kind="task_keywords")
    strategy.current_version = StrategyVersion.objects.create(
        strategy=strategy, number=1, title="A lesson", pattern="p", new_guidance="Use exact paths.",
        condition={"task_kinds": ["file_analysis"]},
    )  # fmt: skip
    strategy.save()
    return strategy


def _edit(**fields) -> dict:
    data = {"title": "A lesson", "pattern": "p", "new_guidance": "Sharper.", "condition": "{}", "guardrails": "[]",
            "reason": "sharper"}  # fmt: skip
    return {**data, **fields}


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("condition", {"regex": f"a{NUL}"}, "regex holds a NUL character (\\u0000), which cannot be stored."),
        ("condition", {"keywords": [f"x{SURROGATE}"]}, "keywords[0] holds a lone surrogate"),
        ("condition", {f"k{NUL}": 1}, "k\\u0000 holds a NUL character"),
        ("guardrails", [{"type": "tool_disabled", "tool": f"calc{NUL}"}], "[0].tool holds a NUL character"),
    ],
)
def test_the_edit_form_refuses_json_that_cannot_be_stored(client, reviewer, field, value, said):
    strategy = _proposed()
    client.force_login(reviewer)
    typed = json.dumps(value)  # the JSON text, with its \u escapes
    assert "\\u" in typed
    response = client.post(reverse("feedback-strategy-edit", args=[strategy.pk]), _edit(**{field: typed}))
    assert response.status_code == 400
    assert said in response.content.decode()
    assert strategy.versions.count() == 1
    strategy.refresh_from_db()
    assert strategy.current_version.number == 1 and strategy.current_version.new_guidance == "Use exact paths."


def test_the_edit_service_refuses_text_and_json_that_cannot_be_stored(reviewer):
    strategy = _proposed()
    with pytest.raises(ValidationError) as refused:
        services.strategy_edit(
            strategy=strategy,
            editor=reviewer,
            new_guidance=f"Use{NUL} paths.",
            guardrails=[{"type": "tool_disabled", "tool": SURROGATE}],
        )
    said = " ".join(refused.value.messages)
    assert "new_guidance holds a NUL character" in said and "guardrails[0].tool holds a lone surrogate" in said
    assert strategy.versions.count() == 1


def test_the_admin_refuses_json_that_cannot_be_stored(client, superuser):  # noqa: F811
    client.force_login(superuser)
    strategy = _proposed()
    url = reverse("admin:feedback_strategy_change", args=[strategy.pk])
    response = admin_save(client, url, **{"versions-0-condition": '{"regex": "a\\u0000"}'})
    assert response.status_code == 200 and "regex holds a NUL character" in response.content.decode()
    strategy.current_version.refresh_from_db()
    assert strategy.current_version.condition == {"task_kinds": ["file_analysis"]}

    profile = EvaluationProfile.objects.create(task_kind="general", evaluators=[{"evaluator": "rule", "weight": 1}])
    url = reverse("admin:feedback_evaluationprofile_change", args=[profile.pk])
    response = admin_save(client, url, evaluators='[{"evaluator": "rule", "weight": 1, "note": "\\u0000"}]')
    assert response.status_code == 200 and "[0].note holds a NUL character" in response.content.decode()
    profile.refresh_from_db()
    assert profile.evaluators == [{"evaluator": "rule", "weight": 1}]

    server = McpServer.objects.create(name="team", command="server", enabled=False)
    McpToolOverride.objects.create(server=server, tool="lookup")
    url = reverse("admin:feedback_mcpserver_change", args=[server.pk])
    response = admin_save(client, url, env='{"TOKEN": "\\ud800"}', **{"overrides-0-result_rules": '["\\u0000"]'})
    html = response.content.decode()
    assert response.status_code == 200 and "TOKEN holds a lone surrogate" in html
    assert "[0] holds a NUL character" in html
    server.refresh_from_db()
    assert server.env == {} and server.overrides.get().result_rules == []

    setting = ToolSetting.objects.create(name="a_tool")
    url = reverse("admin:feedback_toolsetting_change", args=[setting.pk])
    response = admin_save(client, url, config='{"result_rules": [], "x": "\\u0000"}')
    assert response.status_code == 200 and "x holds a NUL character" in response.content.decode()
    setting.refresh_from_db()
    assert setting.config == {}


@pytest.mark.usefixtures("mining_thresholds")
def test_a_model_written_proposal_holding_a_nul_is_stored_from_the_template(settings):
    from .fake_openai import model_writing

    leaky_history()
    with model_writing(settings, '{"title": "Check\\u0000 the answer", "guidance": "Compare it\\u0000."}'):
        touched = mine_and_propose(window_days=30)
    assert touched  # mining went on: the proposals were stored
    for strategy in Strategy.objects.select_related("current_version"):
        assert NUL not in strategy.title and NUL not in strategy.current_version.new_guidance
        assert strategy.title != "Check the answer"
