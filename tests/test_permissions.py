"""Every view, every role. A feedback view (or a page of the project's own) added without a row here
fails the last test."""

import pytest
from django.conf import settings
from django.urls import URLPattern, get_resolver, reverse

from feedback.models import Run

from .conftest import make_user
from .factories import make_run

pytestmark = pytest.mark.django_db

ROLES = ["anonymous", "nobody", "staff", "operator", "reviewer"]
LOGIN = "login"

# (url name, method, kwargs key, expected outcome per role). The run belongs to another
# staff member, so "staff" here is someone else's run; own runs are tested below.
ACCESS = [
    ("feedback-home", "get", None, [LOGIN, 302, 302, 302, 302]),
    # For load balancers: answers everyone, and says nothing but "ok".
    ("feedback-healthz", "get", None, [200, 200, 200, 200, 200]),
    ("feedback-task-submit", "get", None, [LOGIN, 403, 200, 403, 403]),
    ("feedback-run-list", "get", None, [LOGIN, 403, 200, 200, 200]),
    ("feedback-run-detail", "get", "run", [LOGIN, 403, 403, 200, 200]),
    # The run page's parts, each at its own URL (the run list polls its own).
    ("feedback-run-summary", "get", "run", [LOGIN, 403, 403, 200, 200]),
    ("feedback-run-steps", "get", "run", [LOGIN, 403, 403, 200, 200]),
    ("feedback-run-evaluations", "get", "run", [LOGIN, 403, 403, 200, 200]),
    ("feedback-run-child", "get", "run", [LOGIN, 403, 403, 200, 200]),
    ("feedback-run-compare", "get", None, [LOGIN, 403, 200, 200, 200]),
    ("feedback-run-trace-json", "get", "run", [LOGIN, 403, 403, 200, 200]),
    ("feedback-run-cancel", "post", "run", [LOGIN, 403, 403, 403, 302]),
    ("feedback-run-rerun", "post", "run", [LOGIN, 403, 403, 403, 403]),
    ("feedback-strategy-list", "get", None, [LOGIN, 403, 403, 200, 200]),
    ("feedback-confirmation-list", "get", None, [LOGIN, 403, 403, 200, 200]),
    ("feedback-strategy-detail", "get", "strategy", [LOGIN, 403, 403, 200, 200]),
    ("feedback-strategy-decide", "post", "strategy", [LOGIN, 403, 403, 403, 302]),
    ("feedback-strategy-edit", "post", "strategy", [LOGIN, 403, 403, 403, 400]),
    # A newer version (an insight list's update) made the one in use: refused with a message here.
    ("feedback-strategy-adopt", "post", "strategy", [LOGIN, 403, 403, 403, 302]),
    # One click from the harmful-active-strategy alert (refused with a message when there is no harm).
    ("feedback-strategy-roll-back-harm", "post", "strategy", [LOGIN, 403, 403, 403, 302]),
    ("feedback-strategies-demo-report", "get", None, [LOGIN, 403, 403, 200, 200]),
    ("feedback-strategies-mine", "post", None, [LOGIN, 403, 403, 403, 302]),
    ("feedback-strategies-schedule", "post", None, [LOGIN, 403, 403, 403, 302]),
    # The demo loop adds hundreds of runs: on the embedded default only, refused to everyone elsewhere.
    ("feedback-strategies-demo-loop", "post", None, [LOGIN, 403, 403, 403, 302 if settings.EMBEDDED_DATABASE else 403]),
    ("feedback-confirmation-decide", "post", "confirmation", [LOGIN, 403, 403, 403, 302]),
    ("feedback-run-score", "post", "run", [LOGIN, 403, 403, 403, 302]),
    ("feedback-run-reevaluate", "post", "run", [LOGIN, 403, 403, 403, 302]),
    ("feedback-review-queue", "get", None, [LOGIN, 403, 403, 403, 200]),
    # The reviewer inbox: for those who decide something (operators only read confirmations); an
    # item no longer waiting (this run is queued) sends the reviewer on with a message.
    ("feedback-inbox", "get", None, [LOGIN, 403, 403, 403, 200]),
    ("feedback-inbox-claim", "post", "inbox_run", [LOGIN, 403, 403, 403, 302]),
    ("feedback-inbox-decide", "post", "inbox_run", [LOGIN, 403, 403, 403, 302]),
    ("feedback-metrics", "get", None, [LOGIN, 403, 403, 200, 200]),
    ("feedback-schedule-list", "get", None, [LOGIN, 403, 200, 200, 200]),
    ("feedback-dataset-list", "get", None, [LOGIN, 403, 403, 200, 200]),
    ("feedback-dataset-import", "post", None, [LOGIN, 403, 403, 400, 400]),
    ("feedback-dataset-detail", "get", "dataset", [LOGIN, 403, 403, 200, 200]),
    ("feedback-dataset-from-runs", "post", None, [LOGIN, 403, 403, 302, 302]),
    ("feedback-dataset-from-evidence", "post", "strategy", [LOGIN, 403, 403, 302, 302]),
    # The playground: operators and reviewers, on runs they may see.
    ("feedback-run-playground", "get", "run", [LOGIN, 403, 403, 200, 200]),
    # Experiments: operators and reviewers (a strategy's experiment needs a reviewer: the service).
    ("feedback-experiment-list", "get", None, [LOGIN, 403, 403, 200, 200]),
    ("feedback-experiment-start", "post", None, [LOGIN, 403, 403, 400, 400]),
    ("feedback-experiment-detail", "get", "experiment", [LOGIN, 403, 403, 200, 200]),
    ("feedback-experiment-stop", "post", "experiment", [LOGIN, 403, 403, 302, 302]),
    ("feedback-schedule-toggle", "post", "schedule", [LOGIN, 403, 403, 403, 302]),
    # Alerts: the history and the rules are read by operators and reviewers; rules are edited in the admin.
    ("feedback-alert-list", "get", None, [LOGIN, 403, 403, 200, 200]),
    ("feedback-alert-rule-list", "get", None, [LOGIN, 403, 403, 200, 200]),
    # Settings: operators only (feedback/roles.py SETTINGS_PERMS); a POST of nothing is a form error.
    ("feedback-settings-alert-rule-create", "get", None, [LOGIN, 403, 403, 200, 403]),
    ("feedback-settings-alert-rule-edit", "post", "alert_rule", [LOGIN, 403, 403, 400, 403]),
    ("feedback-settings-alert-rule-toggle", "post", "alert_rule", [LOGIN, 403, 403, 302, 403]),
    ("feedback-settings-alert-rule-delete", "get", "alert_rule", [LOGIN, 403, 403, 200, 403]),
    ("feedback-settings-mcp-list", "get", None, [LOGIN, 403, 403, 200, 403]),
    ("feedback-settings-mcp-create", "post", None, [LOGIN, 403, 403, 400, 403]),
    ("feedback-settings-mcp-edit", "get", "mcp_server", [LOGIN, 403, 403, 200, 403]),
    ("feedback-settings-mcp-delete", "get", "mcp_server", [LOGIN, 403, 403, 200, 403]),
    ("feedback-settings-mcp-test", "post", "mcp_server", [LOGIN, 403, 403, 200, 403]),
    ("feedback-settings-price-list", "get", None, [LOGIN, 403, 403, 200, 403]),
    ("feedback-settings-price-create", "get", None, [LOGIN, 403, 403, 200, 403]),
    ("feedback-settings-price-edit", "get", "model_price", [LOGIN, 403, 403, 200, 403]),
    ("feedback-settings-price-delete", "post", "model_price", [LOGIN, 403, 403, 302, 403]),
    ("feedback-settings-tool-list", "get", None, [LOGIN, 403, 403, 200, 403]),
    ("feedback-settings-tool-edit", "get", "tool_setting", [LOGIN, 403, 403, 200, 403]),
    ("feedback-settings-score-list", "get", None, [LOGIN, 403, 403, 200, 403]),
    ("feedback-settings-score-create", "post", None, [LOGIN, 403, 403, 400, 403]),
    ("feedback-settings-score-edit", "get", "score_config", [LOGIN, 403, 403, 200, 403]),
    ("feedback-settings-score-delete", "get", "score_config", [LOGIN, 403, 403, 200, 403]),
    # Everyone signed in has their own API tokens (a token can do what its account can); another
    # person's token is not found.
    ("feedback-api-tokens", "get", None, [LOGIN, 200, 200, 200, 200]),
    ("feedback-api-token-revoke", "post", "token", [LOGIN, 404, 404, 404, 404]),
    # The project's own pages (agentsite/urls.py): accounts and the language switcher. Logging in
    # and resetting a forgotten password need no session; changing it needs one.
    ("login", "get", None, [200, 200, 200, 200, 200]),
    ("logout", "post", None, [LOGIN, 302, 302, 302, 302]),
    ("password_change", "get", None, [LOGIN, 200, 200, 200, 200]),
    ("password_change_done", "get", None, [LOGIN, 200, 200, 200, 200]),
    ("password_reset", "get", None, [200, 200, 200, 200, 200]),
    ("password_reset_done", "get", None, [200, 200, 200, 200, 200]),
    ("password_reset_confirm", "get", "reset", [200, 200, 200, 200, 200]),
    ("password_reset_complete", "get", None, [200, 200, 200, 200, 200]),
    ("set_language", "post", None, [302, 302, 302, 302, 302]),
]


@pytest.fixture
def others_run(db):
    owner = make_user("owner", "staff")
    return make_run(user=owner)


def _kwargs(kind, run):
    if kind == "run":
        return {"run_id": run.pk}
    if kind == "inbox_run":
        return {"kind": "run", "pk": run.pk}
    if kind == "strategy":
        from .test_strategy_lifecycle import make_strategy

        return {"strategy_id": make_strategy().pk}
    if kind == "confirmation":
        from feedback.models import ToolConfirmation

        confirmation = ToolConfirmation.objects.create(run=run, turn=1, tool_call_id="c1", tool_name="send_reply")
        return {"confirmation_id": confirmation.pk}
    if kind == "schedule":
        from feedback.services import task_schedule

        return {"schedule_id": task_schedule(task=run.task, repeat="hours", every=1).pk}
    if kind == "token":
        from feedback.api.tokens import api_token_create

        return {"token_id": api_token_create(user=run.task.created_by, name="theirs", scope="write").token.pk}
    if kind in ("alert_rule", "mcp_server", "model_price", "tool_setting", "score_config"):
        from .test_settings_pages import settings_row

        return settings_row(kind)
    if kind == "dataset":
        from feedback.datasets.imports import dataset_import

        item = '{"text": "What is 6 * 7?", "expected": 42, "checker": "numeric"}'
        version = dataset_import(name="theirs", user=run.task.created_by, fmt="jsonl", content=item)
        return {"dataset_id": version.dataset_id}
    if kind == "experiment":
        from django.contrib.auth.models import User

        from feedback.datasets.imports import dataset_import
        from feedback.experiments.services import experiment_start

        # Called twice by one test (the CSRF test posts twice), so the owner is made once.
        owner = User.objects.filter(username="experimenter").first() or make_user("experimenter", "reviewer")
        item = '{"text": "What is 6 * 7?", "expected": 42, "checker": "numeric"}'
        version = dataset_import(name="theirs", user=owner, fmt="jsonl", content=item)
        experiment = experiment_start(
            user=owner, dataset_version=version, change_kind="guidance", change={"guidance": "Use the calculator."}
        )
        return {"experiment_id": experiment.pk}
    if kind == "reset":
        return {"uidb64": "MQ", "token": "not-a-valid-token"}
    return None


@pytest.mark.parametrize(("name", "method", "kwarg", "expected"), ACCESS)
@pytest.mark.parametrize("role_index", range(len(ROLES)))
def test_role_access(client, others_run, name, method, kwarg, expected, role_index):
    role = ROLES[role_index]
    if role != "anonymous":
        groups = [] if role == "nobody" else [role]
        client.force_login(make_user(f"u-{role}", *groups))
    url = reverse(name, kwargs=_kwargs(kwarg, others_run))
    response = getattr(client, method)(url)
    want = expected[role_index]
    if want == LOGIN:
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login"))
    else:
        assert response.status_code == want, f"{role} {method.upper()} {name}"


def test_staff_control_their_own_runs(client, staff):
    run = make_run(user=staff)
    client.force_login(staff)
    assert client.get(reverse("feedback-run-detail", args=[run.pk])).status_code == 200
    assert client.post(reverse("feedback-run-cancel", args=[run.pk])).status_code == 302
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
    response = client.post(reverse("feedback-run-rerun", args=[run.pk]))
    assert response.status_code == 302
    assert Run.objects.filter(task__created_by=staff).count() == 2
    assert Run.objects.get(retry_of=run).task.text == run.task.text


def test_staff_see_only_their_own_runs_in_the_list(client, staff, others_run):
    mine = make_run(user=staff, text="my own task 1 + 1")
    client.force_login(staff)
    html = client.get(reverse("feedback-run-list")).content.decode()
    assert f'id="run-{mine.pk}"' in html
    assert f'id="run-{others_run.pk}"' not in html


def test_every_feedback_view_has_an_access_row():
    names = set()
    for pattern in get_resolver().url_patterns:
        if isinstance(pattern, URLPattern):  # the project's own (accounts, language), not an include
            names.add(pattern.name)
        for sub in getattr(pattern, "url_patterns", []):
            if (getattr(sub, "name", None) or "").startswith("feedback-"):
                names.add(sub.name)
    assert names == {row[0] for row in ACCESS}


def test_a_persons_own_and_group_permissions_are_read_together_in_one_query(django_assert_num_queries):
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    user = make_user("both", "staff")
    user.user_permissions.add(Permission.objects.get(codename="score_run"))
    user = get_user_model().objects.get(pk=user.pk)  # no permission cached on the object
    with django_assert_num_queries(1):
        assert user.has_perm("feedback.add_task")  # the staff group's
        assert user.has_perm("feedback.score_run")  # their own
        assert not user.has_perm("feedback.decide_strategy")  # neither
    inactive = get_user_model().objects.get(pk=user.pk)
    inactive.is_active = False
    assert not inactive.has_perm("feedback.add_task") and not inactive.has_perm("feedback.score_run")
    boss = get_user_model().objects.create_superuser("boss", password="x")
    assert boss.has_perm("feedback.decide_strategy") and "feedback.decide_strategy" in boss.get_all_permissions()
