"""Operating the runtime: tools switched off without a restart, logs that carry the run."""

import json
import logging

import pytest

from feedback.agent.loop import execute_run
from feedback.logging import JsonFormatter, RunContextFilter
from feedback.models import Run, ToolSetting

from .factories import make_run

pytestmark = pytest.mark.django_db


def test_a_disabled_tool_is_not_offered_and_refused(db):
    ToolSetting.objects.filter(name="calculator").update(enabled=False)
    run = make_run(text="What is 2 + 2?")
    execute_run(run.pk)
    run.refresh_from_db()
    assert "calculator" not in run.tools_offered
    call = run.steps.get(tool_name="calculator")  # the offline model tries it anyway
    assert call.success is False and "Unknown tool 'calculator'" in call.error
    ToolSetting.objects.filter(name="calculator").update(enabled=True)
    again = make_run(text="What is 2 + 2?")
    execute_run(again.pk)
    again.refresh_from_db()
    assert again.status == Run.Status.SUCCEEDED and again.final_output == "2 + 2 = 4"


def test_a_timeout_override_applies_at_the_next_run(db):
    from feedback.agent.tools import enabled_tools

    ToolSetting.objects.filter(name="read_text_file").update(timeout_seconds=0.5)
    assert enabled_tools()["read_text_file"].timeout == 0.5


def test_every_log_line_of_a_run_carries_its_ids(db, caplog):
    handler_filter = RunContextFilter()
    caplog.handler.addFilter(handler_filter)
    caplog.set_level(logging.INFO, logger="feedback")
    run = make_run(text="What is 2 + 2?")
    execute_run(run.pk)
    finished = [r for r in caplog.records if " finished: " in r.getMessage()]
    assert finished and finished[0].run_id == run.pk and finished[0].step == 3
    line = json.loads(JsonFormatter().format(finished[0]))
    assert line["run_id"] == run.pk and line["message"].startswith(f"run {run.pk} finished: succeeded")


def test_validation_is_recorded_on_the_step_and_rules_come_from_the_admin(db):
    ToolSetting.objects.filter(name="calculator").update(
        config={"result_rules": [{"type": "range", "path": "value", "max": 100}]}
    )
    small = make_run(text="What is 2 + 2?")
    execute_run(small.pk)
    step = small.steps.get(tool_name="calculator")
    assert step.validation_status == "pass" and len(step.validation["checks"]) == 2
    big = make_run(text="What is 200 * 3?")
    execute_run(big.pk)
    step = big.steps.get(tool_name="calculator")
    assert step.validation_status == "fail" and step.success is False
    assert step.error_class == "ValidationFailed" and step.attempts == 1
    assert big.steps.filter(kind="reflection").exists()


def test_every_built_in_tool_has_a_setting_row_for_the_admin(db):
    from feedback.agent.tools import BUILTIN_TOOLS

    # Created after migrate, so operators find every tool in the admin, enabled.
    assert set(ToolSetting.objects.values_list("name", flat=True)) >= set(BUILTIN_TOOLS)
    assert not ToolSetting.objects.filter(enabled=False).exists()
