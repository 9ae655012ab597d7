"""The Settings pages (issue 26, point 3): operators keep alert rules, MCP servers, model prices and
tools in the app; reviewers and staff see nothing of it. Each form keeps what was typed on error,
each change records who made it, and links in alerts start with the address people reach."""

import runpy
import sys
from decimal import Decimal

import pytest
from django.conf import settings as django_settings
from django.urls import reverse

from feedback import costs, settings_services
from feedback.agent.tools import enabled_tools
from feedback.alerts.messages import notification
from feedback.models import AlertDelivery, AlertIncident, AlertRule, McpServer, ModelPrice, ScoreConfig, ToolSetting

from .conftest import MCP_SERVER, make_user, mcp_server_processes

pytestmark = pytest.mark.django_db

SCORE_RULE = {
    "name": "Scores fall",
    "kind": "score_drop",
    "enabled": "on",
    "task_kind": "",
    "window_minutes": "60",
    "threshold": "0.6",
    "change": "",
    "error_measure": "failed_runs",
    "min_runs": "10",
    "queued_minutes": "15",
    "heartbeat_minutes": "5",
    "confirmation_minutes": "60",
    "webhook_urls": "https://hooks.example.org/alerts",
    "emails": "ops@example.com",
}


def settings_row(kind: str) -> dict:
    """One row of each kind the Settings pages edit, as URL kwargs (tests/test_permissions.py and
    tests/test_security.py too, which may ask twice in one test: the same row)."""
    if kind == "alert_rule":
        rule, _ = AlertRule.objects.get_or_create(name="Queue", kind=AlertRule.Kind.STUCK_QUEUE)
        return {"rule_id": rule.pk}
    if kind == "mcp_server":
        server, _ = McpServer.objects.get_or_create(
            name="nowhere", defaults={"command": "/nonexistent/mcp-server", "timeout_seconds": 5}
        )
        return {"server_id": server.pk}
    if kind == "model_price":
        price, _ = ModelPrice.objects.get_or_create(
            model_name="gpt-x", defaults={"input_per_million": 1, "output_per_million": 2}
        )
        return {"price_id": price.pk}
    if kind == "score_config":
        config, _ = ScoreConfig.objects.get_or_create(name="Tone", defaults={"data_type": "boolean"})
        return {"config_id": config.pk}
    return {"setting_id": ToolSetting.objects.get_or_create(name="calculator")[0].pk}


@pytest.fixture
def as_operator(client, operator):
    client.force_login(operator)
    return client


def test_the_settings_section_is_in_the_nav_of_operators_only(client, operator, reviewer, staff):
    link = f'href="{reverse("feedback-settings-mcp-list")}"'
    for user, shown in ((operator, True), (reviewer, False), (staff, False)):
        client.force_login(user)
        html = client.get(reverse("feedback-run-list")).content.decode()
        assert (link in html) is shown, user.username
    client.force_login(reviewer)  # the rules list stays readable to reviewers, without any control
    html = client.get(reverse("feedback-alert-rule-list")).content.decode()
    assert reverse("feedback-settings-alert-rule-create") not in html


@pytest.mark.parametrize("role", ["reviewer", "staff"])
def test_reviewers_and_staff_change_nothing(client, role):
    client.force_login(make_user(f"u-{role}", role))
    rule = AlertRule.objects.get(pk=settings_row("alert_rule")["rule_id"])
    price = ModelPrice.objects.get(pk=settings_row("model_price")["price_id"])
    server = McpServer.objects.get(pk=settings_row("mcp_server")["server_id"])
    attempts = [
        (reverse("feedback-settings-alert-rule-create"), SCORE_RULE),
        (reverse("feedback-settings-alert-rule-toggle", args=[rule.pk]), {}),
        (reverse("feedback-settings-alert-rule-delete", args=[rule.pk]), {}),
        (reverse("feedback-settings-price-edit", args=[price.pk]), {"model_name": "x", "input_per_million": "9"}),
        (reverse("feedback-settings-mcp-delete", args=[server.pk]), {}),
        (reverse("feedback-settings-mcp-test", args=[server.pk]), {}),
    ]
    for url, data in attempts:
        assert client.post(url, data).status_code == 403, url
    rule.refresh_from_db()
    price.refresh_from_db()
    assert rule.enabled and price.input_per_million == 1 and AlertRule.objects.count() == 1
    assert McpServer.objects.filter(pk=server.pk).exists() and server.list_error == ""


def test_an_operator_creates_an_alert_rule_and_it_records_who(as_operator, operator):
    response = as_operator.post(reverse("feedback-settings-alert-rule-create"), SCORE_RULE)

    assert response.status_code == 302 and response["Location"] == reverse("feedback-alert-rule-list")
    rule = AlertRule.objects.get()
    assert (rule.name, rule.kind, rule.threshold, rule.updated_by) == ("Scores fall", "score_drop", 0.6, operator)
    assert rule.webhook_url_list() == ["https://hooks.example.org/alerts"]
    html = as_operator.get(reverse("feedback-alert-rule-list")).content.decode()
    row = html.split(f'id="alert-rule-{rule.pk}"')[1].split("</tr>")[0]
    assert "by operator" in row and reverse("feedback-settings-alert-rule-edit", args=[rule.pk]) in row
    assert "“Scores fall” is saved." in html


def test_a_bad_alert_rule_is_refused_with_its_errors_and_nothing_typed_is_lost(as_operator):
    typed = {**SCORE_RULE, "threshold": "1.5", "webhook_urls": "not a url\nhttps://ok.example.org/x"}

    response = as_operator.post(reverse("feedback-settings-alert-rule-create"), typed)

    assert response.status_code == 400 and not AlertRule.objects.exists()
    html = response.content.decode()
    assert "Scores and rates are between 0 and 1." in html and "Not an http(s) URL: not a url" in html
    assert 'value="Scores fall"' in html and 'value="1.5"' in html
    assert "not a url\nhttps://ok.example.org/x</textarea>" in html and "ops@example.com</textarea>" in html


def test_an_alert_rule_is_edited_switched_off_and_on_and_deleted_after_confirmation(as_operator):
    rule = AlertRule.objects.get(pk=settings_row("alert_rule")["rule_id"])
    edit = reverse("feedback-settings-alert-rule-edit", args=[rule.pk])
    assert 'value="Queue"' in as_operator.get(edit).content.decode()

    data = {**SCORE_RULE, "name": "Stuck queue", "kind": "stuck_queue", "threshold": "", "queued_minutes": "30"}
    assert as_operator.post(edit, data).status_code == 302
    rule.refresh_from_db()
    assert (rule.name, rule.queued_minutes) == ("Stuck queue", 30)

    toggle = reverse("feedback-settings-alert-rule-toggle", args=[rule.pk])
    as_operator.post(toggle)
    assert not AlertRule.objects.get(pk=rule.pk).enabled
    as_operator.post(toggle)
    assert AlertRule.objects.get(pk=rule.pk).enabled

    delete = reverse("feedback-settings-alert-rule-delete", args=[rule.pk])
    page = as_operator.get(delete).content.decode()
    assert "Delete the alert rule “Stuck queue”?" in page and AlertRule.objects.filter(pk=rule.pk).exists()
    assert as_operator.post(delete).status_code == 302 and not AlertRule.objects.filter(pk=rule.pk).exists()


def test_what_operators_typed_is_shown_escaped(as_operator):
    as_operator.post(reverse("feedback-settings-alert-rule-create"), {**SCORE_RULE, "name": "<script>x()</script>"})
    ModelPrice.objects.create(model_name="<b>m</b>", input_per_million=1, output_per_million=1, note="<img src=x>")

    rules = as_operator.get(reverse("feedback-alert-rule-list")).content.decode()
    prices = as_operator.get(reverse("feedback-settings-price-list")).content.decode()

    assert "<script>x()</script>" not in rules and "&lt;script&gt;x()&lt;/script&gt;" in rules
    assert "<b>m</b>" not in prices and "<img src=x>" not in prices and "&lt;img src=x&gt;" in prices


def test_an_mcp_server_is_added_edited_and_removed(as_operator, operator):
    create = reverse("feedback-settings-mcp-create")
    typed = {
        "name": "team",
        "enabled": "on",
        "transport": "stdio",
        "command": sys.executable,
        "args": '["server.py", ',
        "env": "",
        "url": "",
        "headers": "{}",
        "timeout_seconds": "30",
        "expose": "",
    }

    refused = as_operator.post(create, typed)
    assert refused.status_code == 400 and not McpServer.objects.exists()
    assert "Enter a valid JSON." in refused.content.decode()
    assert "[&quot;server.py&quot;, </textarea>" in refused.content.decode()  # as typed, to be fixed

    assert as_operator.post(create, {**typed, "args": '["server.py"]'}).status_code == 302
    server = McpServer.objects.get()
    assert (server.args, server.env, server.updated_by) == (["server.py"], {}, operator)

    McpServer.objects.filter(pk=server.pk).update(listed_at="2026-01-01T00:00Z")
    edit = reverse("feedback-settings-mcp-edit", args=[server.pk])
    assert as_operator.post(edit, {**typed, "args": '["other.py"]'}).status_code == 302
    server.refresh_from_db()
    assert server.args == ["other.py"] and server.listed_at is None  # beat lists the changed server again

    assert as_operator.post(reverse("feedback-settings-mcp-delete", args=[server.pk])).status_code == 302
    assert not McpServer.objects.exists()


def test_an_http_server_needs_its_url(as_operator):
    typed = {
        "name": "remote",
        "transport": "http",
        "command": "",
        "args": "[]",
        "env": "{}",
        "url": "",
        "headers": '{"Authorization": "Bearer abc"}',
        "timeout_seconds": "30",
        "expose": "[]",
    }
    response = as_operator.post(reverse("feedback-settings-mcp-create"), typed)
    assert response.status_code == 400 and "An HTTP server needs its URL." in response.content.decode()
    assert not McpServer.objects.exists()


def test_test_connection_starts_the_real_server_and_shows_its_tools(as_operator):
    server = McpServer.objects.create(
        name="team", command=sys.executable, args=[str(MCP_SERVER), "stdio"], timeout_seconds=30
    )

    response = as_operator.post(reverse("feedback-settings-mcp-test", args=[server.pk]), headers={"HX-Request": "true"})

    html = response.content.decode()
    assert response.status_code == 200 and html.lstrip().startswith(f'<div id="mcp-test-{server.pk}"')
    assert "team answered with 11 tools." in html and "<code>team__add</code>" in html
    server.refresh_from_db()
    assert len(server.tool_listing) == 11 and server.listed_at is not None
    assert mcp_server_processes() == []  # the listing's process ended with it
    listing = as_operator.get(reverse("feedback-settings-mcp-list")).content.decode()
    assert ">11 / 11<" in listing or "/ 11</td>" in listing


def test_test_connection_shows_why_a_server_cannot_be_reached(as_operator):
    server = McpServer.objects.get(pk=settings_row("mcp_server")["server_id"])

    response = as_operator.post(reverse("feedback-settings-mcp-test", args=[server.pk]))  # without htmx: the page

    html = response.content.decode()
    assert response.status_code == 200 and "<h1>MCP servers</h1>" in html
    assert "nowhere: could not list its tools." in html and "could not be started" in html
    assert "No such file or directory" in html


def test_test_connection_of_a_server_that_hangs_stops_at_the_tests_bound(as_operator, monkeypatch):
    monkeypatch.setattr(settings_services, "MCP_TEST_TIMEOUT_SECONDS", 2.0)
    server = McpServer.objects.create(
        name="wedged", command=sys.executable, args=[str(MCP_SERVER), "stdio", "--hang-at-start"], timeout_seconds=600
    )

    html = as_operator.post(reverse("feedback-settings-mcp-test", args=[server.pk])).content.decode()

    assert "wedged: could not list its tools." in html
    server.refresh_from_db()
    assert server.list_error and server.timeout_seconds == 600  # its runs keep their own timeout
    assert mcp_server_processes() == []


def test_what_a_server_said_is_shown_escaped(as_operator):
    server = McpServer.objects.get(pk=settings_row("mcp_server")["server_id"])
    McpServer.objects.filter(pk=server.pk).update(list_error="<script>alert(1)</script>")

    html = as_operator.get(reverse("feedback-settings-mcp-list")).content.decode()

    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_model_prices_are_added_refused_when_wrong_edited_and_deleted(as_operator, operator):
    before = ModelPrice.objects.count()  # the seeded prices (migrations) stay as they are
    create = reverse("feedback-settings-price-create")
    typed = {
        "model_name": "team-model",
        "input_per_million": "-1",
        "output_per_million": "10",
        "note": "list price",
        "effective_from": "2026-01-01T00:00",
    }

    refused = as_operator.post(create, typed)
    assert refused.status_code == 400 and ModelPrice.objects.count() == before
    assert "A price is 0 or more." in refused.content.decode() and 'value="team-model"' in refused.content.decode()

    assert as_operator.post(create, {**typed, "input_per_million": "2.5"}).status_code == 302
    price = ModelPrice.objects.get(model_name="team-model")
    assert (price.input_per_million, price.output_per_million, price.updated_by) == (Decimal("2.5"), 10, operator)
    duplicate = as_operator.post(create, {**typed, "input_per_million": "3"})
    assert duplicate.status_code == 400 and ModelPrice.objects.count() == before + 1

    edit = reverse("feedback-settings-price-edit", args=[price.pk])
    assert as_operator.post(edit, {**typed, "input_per_million": "3"}).status_code == 302
    assert ModelPrice.objects.get(pk=price.pk).input_per_million == 3
    page = as_operator.get(reverse("feedback-settings-price-list")).content.decode()
    assert "by operator" in page and "<code>team-model</code>" in page and "2026-01-01 00:00" in page

    assert as_operator.post(reverse("feedback-settings-price-delete", args=[price.pk])).status_code == 302
    assert not ModelPrice.objects.filter(pk=price.pk).exists() and ModelPrice.objects.count() == before


def test_a_tool_is_disabled_and_given_a_timeout_that_runs_use(as_operator, operator):
    setting, _ = ToolSetting.objects.get_or_create(name="calculator")
    edit = reverse("feedback-settings-tool-edit", args=[setting.pk])

    refused = as_operator.post(edit, {"timeout_seconds": "9999"})
    assert refused.status_code == 400 and 'value="9999"' in refused.content.decode()
    assert ToolSetting.objects.get(pk=setting.pk).enabled  # nothing saved

    assert as_operator.post(edit, {"timeout_seconds": "3"}).status_code == 302  # unticked: disabled
    assert "calculator" not in enabled_tools()
    assert as_operator.post(edit, {"enabled": "on", "timeout_seconds": "3"}).status_code == 302
    assert enabled_tools()["calculator"].timeout == 3
    setting.refresh_from_db()
    assert setting.updated_by == operator
    page = as_operator.get(reverse("feedback-settings-tool-list")).content.decode()
    row = page.split(f'id="tool-setting-{setting.pk}"')[1].split("</tr>")[0]
    assert "<td>3.0</td>" in row and "by operator" in row


def _site_url(monkeypatch, tmp_path, **variables: str) -> str:
    for name in ("SITE_URL", "WEB_PORT", "PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("VAR_DIR", str(tmp_path))
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    return runpy.run_path(str(django_settings.BASE_DIR / "agentsite" / "settings.py"))["SITE_URL"]


def test_site_url_follows_the_port_and_an_alerts_link_says_it(monkeypatch, tmp_path, settings):
    assert _site_url(monkeypatch, tmp_path) == "http://localhost:8000"
    assert _site_url(monkeypatch, tmp_path, PORT="8123") == "http://localhost:8123"
    # `make run`: honcho gives each process a PORT of its own; WEB_PORT is the web server's.
    assert _site_url(monkeypatch, tmp_path, PORT="5100", WEB_PORT="8123") == "http://localhost:8123"
    assert _site_url(monkeypatch, tmp_path, PORT="8123", SITE_URL="https://ops.example.org/") == (
        "https://ops.example.org"
    )

    settings.SITE_URL = _site_url(monkeypatch, tmp_path, PORT="8123")
    rule = AlertRule.objects.create(name="Queue", kind=AlertRule.Kind.STUCK_QUEUE)
    incident = AlertIncident.objects.create(rule=rule, subject="queued")
    delivery = AlertDelivery.objects.create(
        incident=incident, event=AlertDelivery.Event.OPEN, channel=AlertDelivery.Channel.WEBHOOK, target="https://x/"
    )
    body = notification(delivery)
    assert body["url"].startswith("http://localhost:8123/") and body["history_url"].startswith("http://localhost:8123/")


def test_a_price_entered_ahead_applies_from_its_date_and_the_list_says_which_is_in_effect(as_operator):
    create = reverse("feedback-settings-price-create")
    for when, price in (("2026-01-01T00:00", "1"), ("2026-06-01T00:00", "2"), ("2999-01-01T00:00", "9")):
        data = {
            "model_name": "team-model",
            "input_per_million": price,
            "output_per_million": price,
            "effective_from": when,
        }
        assert as_operator.post(create, data).status_code == 302

    assert costs.price_for(backend="openai", model_name="team-model") == costs.Price(Decimal(2), Decimal(2))
    html = as_operator.get(reverse("feedback-settings-price-list")).content.decode()
    states = [
        row.split('<span class="badge', 1)[1].split("</span>")[0].split(">")[-1]
        for row in html.split('id="model-price-')[1:]
        if "team-model" in row
    ]
    assert states == ["scheduled", "in effect", "replaced"]
    again = as_operator.post(
        create,
        {
            "model_name": "team-model",
            "input_per_million": "3",
            "output_per_million": "3",
            "effective_from": "2026-06-01T00:00",
        },
    )
    assert again.status_code == 400 and "already exists" in again.content.decode()
