"""The run-wide guardrails for small models: fewer tools (tool_subset) and a tool-mode switch (tool_mode)."""

import json
from pathlib import Path

import pytest

from feedback.agent.guardrails import Guardrails, check_guardrails
from feedback.agent.tools import BUILTIN_TOOLS

WORKSPACE = Path("/nonexistent")


def offered(*rules: dict) -> list[str]:
    return sorted(Guardrails(list(rules), WORKSPACE).tools(BUILTIN_TOOLS))


def test_a_tool_subset_offers_only_its_tools_and_the_plan():
    assert offered({"type": "tool_subset", "tools": ["calculator", "read_text_file"]}) == [
        "calculator", "read_text_file", "update_plan",
    ]  # fmt: skip


def test_two_subsets_offer_the_tools_in_both():
    assert offered(
        {"type": "tool_subset", "tools": ["calculator", "read_text_file"]},
        {"type": "tool_subset", "tools": ["read_text_file", "list_directory"]},
    ) == ["read_text_file", "update_plan"]


def test_a_subset_of_unknown_tools_takes_nothing_away():
    assert offered({"type": "tool_subset", "tools": ["gone_tool"]}) == sorted(BUILTIN_TOOLS)


def test_a_disabled_tool_stays_disabled_inside_a_subset():
    assert offered(
        {"type": "tool_subset", "tools": ["calculator", "read_text_file"]},
        {"type": "tool_disabled", "tool": "calculator"},
    ) == ["read_text_file", "update_plan"]


def test_a_tool_outside_the_subset_is_not_refused_by_check_but_not_offered():
    # The engine offers the smaller registry; a call to a tool outside it is the invoker's
    # "Unknown tool", exactly as for any tool not offered.
    guardrails = Guardrails([{"type": "tool_subset", "tools": ["calculator"]}], WORKSPACE)
    assert "http_get" not in guardrails.tools(BUILTIN_TOOLS)
    assert guardrails.check("calculator", '{"expression": "1+1"}', set()).refusal == ""


@pytest.mark.parametrize(
    ("modes", "configured", "used"),
    [
        ([], "auto", "auto"),
        ([], "json", "json"),
        (["json"], "auto", "json"),
        (["json"], "native", "json"),
        (["json", "json"], "native", "json"),
        # Native calls, with the JSON fallback unless native alone was configured.
        (["native"], "auto", "auto"),
        (["native"], "json", "auto"),
        (["native"], "native", "native"),
        # Two strategies that disagree: neither switches the mode.
        (["json", "native"], "auto", "auto"),
        (["json", "native"], "json", "json"),
    ],
)
def test_the_tool_mode_a_run_uses(modes, configured, used):
    rules = [{"type": "tool_mode", "mode": m} for m in modes] + [{"type": "tool_disabled", "tool": "http_get"}]
    assert Guardrails(rules, WORKSPACE).tool_mode(configured) == used


def test_the_run_wide_guardrails_are_checked():
    fine = [{"type": "tool_subset", "tools": ["calculator"]}, {"type": "tool_mode", "mode": "json"}]
    assert check_guardrails(fine) == []
    problems = check_guardrails([
        {"type": "tool_subset", "tools": []},
        {"type": "tool_subset", "tools": "calculator"},
        {"type": "tool_mode", "mode": "xml"},
        {"type": "tool_disabled"},
    ])  # fmt: skip
    assert problems == [
        "Guardrail 1: a tool subset needs 'tools' (a non-empty list of tool names).",
        "Guardrail 2: a tool subset needs 'tools' (a non-empty list of tool names).",
        "Guardrail 3: a tool mode needs 'mode': json or native.",
        "Guardrail 4: name the tool it applies to.",
    ]


def test_a_file_name_given_as_the_text_is_passed_as_the_path(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "notes.md").write_text("Some notes.")
    (tmp_path / "report.txt").write_text("A report.")
    rule = {"type": "parameter_rule", "tool": "analyze_text", "param": "text", "action": "file_name_as_path"}
    assert check_guardrails([rule]) == []
    rails = Guardrails([rule], tmp_path)
    moved = rails.check("analyze_text", '{"text": "report.txt"}', set())
    assert json.loads(moved.arguments) == {"path": "report.txt"} and "passed as path" in moved.notes[0]
    # A bare name of a file in a sub-folder: the one file of that name.
    assert json.loads(rails.check("analyze_text", '{"text": "notes.md"}', set()).arguments) == {"path": "docs/notes.md"}
    # What Qwen2.5-Coder-1.5B sent beside the name: an empty path, or a folder.
    for arguments in ('{"text": "report.txt", "path": ""}', '{"text": "report.txt", "path": "."}',
                      '{"text": "report.txt", "path": "docs"}'):  # fmt: skip
        assert json.loads(rails.check("analyze_text", arguments, set()).arguments) == {"path": "report.txt"}
    # The same file as the path beside its name as the text (the tool takes exactly one): the text goes.
    both = {"report.txt": "report.txt", "notes.md": "docs/notes.md"}
    for name, path in both.items():
        arguments = json.dumps({"text": name, "path": path})
        moved = rails.check("analyze_text", arguments, set())
        assert json.loads(moved.arguments) == {"path": path} and "passed as path" in moved.notes[0]
    # Text is text, a file's path already given is kept, and no file outside the workspace is named.
    for arguments in ('{"text": "Summarise report.txt"}', '{"text": "report.txt", "path": "docs/notes.md"}',
                      '{"text": "report.txt", "path": "../x"}', '{"text": "../x"}'):  # fmt: skip
        kept = rails.check("analyze_text", arguments, set())
        assert json.loads(kept.arguments) == json.loads(arguments) and kept.notes == []
    assert check_guardrails([{**rule, "action": "guess"}]) != []
