"""Property-based fuzzing (hypothesis): every form, every view that takes input, and the tool
argument validation of every built-in tool answer hostile input with a clean error, never an
unhandled exception."""

import inspect
import json
import os

import pytest
from django import forms as django_forms
from django.core.files.uploadedfile import SimpleUploadedFile
from django.http import QueryDict
from django.urls import reverse
from django.utils.datastructures import MultiValueDict
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from feedback import forms as feedback_forms
from feedback import roles
from feedback.agent.invoker import invoke, parse_arguments
from feedback.agent.tools import BUILTIN_TOOLS, ToolContext, ToolError

from .conftest import make_user
from .factories import make_run

pytestmark = pytest.mark.django_db

FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

EDGE_VALUES = [
    "", " ", "0", "-1", "1e309", "-1e309", "NaN", "inf", "0.5", "1", "99999999999999999999999", "1; DROP TABLE x",
    "<script>alert(1)</script>", "\x00", "a\x00b", "\ud7ff", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "../../etc/passwd", "{", "[]", "{}", "null",
    '{"a": [1, 2, {"b": null}]}', '[{"type": "tool_disabled", "tool": "x"}]', "* * * * *", "61 25 32 13 8",
    "x" * 10_001, "approve", "reject", "promote", "roll_back", "general", "arithmetic", "2024-02-30", "2024-01-01",
]  # fmt: skip
# Names the multipart parser would hand over (it drops a file without one).
file_names = st.text(min_size=1, max_size=40).filter(lambda n: os.path.basename(n) not in {"", ".", ".."})
values = st.one_of(st.sampled_from(EDGE_VALUES), st.text(max_size=200), st.integers().map(str), st.floats().map(str))


def all_forms() -> list[type[django_forms.Form]]:
    found = [
        cls
        for _, cls in inspect.getmembers(feedback_forms, inspect.isclass)
        if issubclass(cls, django_forms.BaseForm) and cls.__module__.startswith(f"{feedback_forms.__name__}.")
    ]
    return sorted(found, key=lambda c: c.__name__)


def test_every_form_is_fuzzed():
    names = {f.__name__ for f in all_forms()}
    assert names >= {"TaskForm", "ConfirmationForm", "HumanScoreForm", "StrategyDecisionForm", "StrategyEditForm",
                      "RunFilterForm", "MiningScheduleForm", "MetricsFilterForm", "AlertFilterForm",
                      "ApiTokenForm"}  # fmt: skip


def _bound(form_class, data: dict[str, list[str]], uploads: list[tuple[str, bytes]]):
    query = QueryDict(mutable=True)
    for name, items in data.items():
        query.setlist(name, items)
    files = MultiValueDict({"files": [SimpleUploadedFile(n, c) for n, c in uploads]}) if uploads else None
    return form_class(data=query, files=files)


@pytest.mark.parametrize("form_class", all_forms(), ids=lambda c: c.__name__)
def test_forms_answer_any_input_with_a_clean_error(form_class):
    field_names = [*form_class.base_fields, "unexpected", "csrfmiddlewaretoken"]

    @FUZZ
    @given(
        data=st.dictionaries(st.sampled_from(field_names), st.lists(values, min_size=1, max_size=3), max_size=12),
        uploads=st.lists(st.tuples(file_names, st.binary(max_size=300)), max_size=3),
    )
    def check(data, uploads):
        form = _bound(form_class, data, uploads)
        if form.is_valid():
            assert isinstance(form.cleaned_data, dict)
        else:
            assert form.errors
            json.loads(form.errors.as_json())  # the errors are plain, serialisable messages
        str(form)  # and the form renders back whatever was sent

    check()


# --- views that take input, as the people allowed to use them -----------------------------------
def _view_cases():
    return [
        ("post", "feedback-task-submit", "staff", list(feedback_forms.TaskForm.base_fields)),
        ("post", "feedback-strategy-decide", "reviewer", list(feedback_forms.StrategyDecisionForm.base_fields)),
        ("post", "feedback-strategy-edit", "reviewer", list(feedback_forms.StrategyEditForm.base_fields)),
        ("post", "feedback-strategy-adopt", "reviewer", ["number", "reason"]),
        ("get", "feedback-strategy-detail", "operator", ["insights_version"]),
        ("post", "feedback-strategies-schedule", "reviewer", ["every_minutes"]),
        ("post", "feedback-confirmation-decide", "reviewer", ["decision", "reason"]),
        ("post", "feedback-run-score", "reviewer", list(feedback_forms.HumanScoreForm.base_fields)),
        ("post", "feedback-dataset-import", "reviewer", ["name", "format", "content"]),
        ("get", "feedback-run-list", "operator", [*feedback_forms.RunFilterForm.base_fields, "after"]),
        ("get", "feedback-metrics", "operator", list(feedback_forms.MetricsFilterForm.base_fields)),
        ("get", "feedback-run-steps", "operator", ["after", "seen", "problems", "q"]),
        ("get", "feedback-run-detail", "operator", ["problems", "q"]),
        ("get", "feedback-run-summary", "operator", ["seen"]),
        ("get", "feedback-alert-list", "operator", [*feedback_forms.AlertFilterForm.base_fields, "page"]),
        ("get", "feedback-run-trace-json", "operator", ["step"]),
        ("get", "feedback-task-submit", "staff", ["kind"]),
    ]


@pytest.mark.parametrize(("method", "name", "role", "fields"), _view_cases(), ids=lambda v: str(v))
def test_views_answer_any_input_without_a_server_error(client, method, name, role, fields):
    from feedback.models import ToolConfirmation

    from .test_strategy_lifecycle import make_strategy

    client.force_login(make_user(f"fuzz-{role}", getattr(roles, role.upper())))
    run = make_run()
    kwargs = {
        "feedback-strategy-decide": {"strategy_id": make_strategy().pk},
        "feedback-strategy-edit": {"strategy_id": make_strategy().pk},
        "feedback-strategy-adopt": {"strategy_id": make_strategy().pk},
        "feedback-strategy-detail": {"strategy_id": make_strategy().pk},
        "feedback-confirmation-decide": {
            "confirmation_id": ToolConfirmation.objects.create(
                run=run, turn=1, tool_call_id="c1", tool_name="send_reply", arguments={}
            ).pk
        },
        "feedback-run-score": {"run_id": run.pk},
        "feedback-run-steps": {"run_id": run.pk},
        "feedback-run-detail": {"run_id": run.pk},
        "feedback-run-summary": {"run_id": run.pk},
        "feedback-run-trace-json": {"run_id": run.pk},
    }.get(name)
    url = reverse(name, kwargs=kwargs)

    @settings(FUZZ, max_examples=40)
    @given(data=st.dictionaries(st.sampled_from(fields), st.lists(values, min_size=1, max_size=2), max_size=8),
           htmx=st.booleans())  # fmt: skip
    def check(data, htmx):
        headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}
        if method == "get" and any("\x00" in v for items in data.values() for v in items):
            data = {k: [v.replace("\x00", "") for v in items] for k, items in data.items()}  # not in a URL
        response = getattr(client, method)(url, data, **headers)
        assert response.status_code < 500

    check()


# --- tool arguments -----------------------------------------------------------------------------
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=50),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)


def _raw_arguments(tool_name: str):
    properties = list(BUILTIN_TOOLS[tool_name].parameters.get("properties", {})) or ["x"]
    objects = st.dictionaries(st.sampled_from(properties) | st.text(max_size=10), json_values, max_size=5)
    return st.one_of(
        objects.map(json.dumps),
        json_values.map(json.dumps),
        st.text(max_size=300),
        st.sampled_from(['{"a": NaN}', '{"a": Infinity}', '{"a": 1e999}', "[" * 50_000, "{" * 3, '"\\ud800"', ""]),
    )


@pytest.mark.parametrize("tool_name", sorted(BUILTIN_TOOLS))
def test_tool_arguments_are_validated_with_a_clean_error(tool_name):
    tool = BUILTIN_TOOLS[tool_name]

    @FUZZ
    @given(raw=_raw_arguments(tool_name))
    @example(raw="[" * 100_000 + "]" * 100_000)
    @example(raw='{"path": "' + "a" * 300_000 + '"}')
    def check(raw):
        try:
            arguments = parse_arguments(raw, tool)
        except ToolError as exc:
            assert str(exc)
        else:
            assert isinstance(arguments, dict)

    check()


SAFE_TO_RUN = ["analyze_text", "calculator", "list_directory", "read_text_file"]


@pytest.mark.parametrize("tool_name", SAFE_TO_RUN)
def test_tool_calls_with_any_arguments_end_in_an_outcome(tool_name, tmp_path):
    (tmp_path / "a.txt").write_text("hello world")
    context = ToolContext(run_id=0, workspace=tmp_path)

    @settings(FUZZ, max_examples=40)
    @given(raw=_raw_arguments(tool_name))
    def check(raw):
        outcome = invoke(tool_name, raw, context, BUILTIN_TOOLS)
        assert outcome.ok or outcome.error
        json.dumps(outcome.arguments)
        json.dumps({"ok": outcome.ok, "result": outcome.result, "error": outcome.error})  # what the model reads

    check()
