"""Guardrails: rules from strategies that the engine enforces whatever the model does.

Kinds (each a dict with a "type"):
- ``tool_precondition``: ``{"tool": "read_text_file", "requires": "list_directory"}`` — the
  tool is refused until the required tool has succeeded in this run.
- ``parameter_rule``: ``{"tool": ..., "param": ..., "pattern": "^[^/]"}`` refuses arguments
  that do not match (a search, on RE2: feedback/saferegex.py); ``"action":
  "resolve_in_workspace"`` rewrites a file path that does not exist to the one file of that
  name in the workspace, when there is exactly one;
  ``"action": "file_name_as_path"`` moves a value that is exactly the name of a workspace file
  (found the same way) from that parameter to ``path``, when the call gives no file path or that
  same file as ``path`` (then the value is dropped, since the tool takes exactly one): a rule
  about the call's values and the workspace, whoever wrote the call (mined from the tool's own
  error, "… is the name of a file in the workspace, not its text").
- ``retry_policy``: ``{"tool": ..., "timeout": 20, "max_attempts": 5}`` overrides the tool's.
- ``tool_disabled``: ``{"tool": ...}`` refuses the tool for the runs the strategy matches.
- ``answer_precondition``: ``{"tool": "calculator"}`` refuses a final answer until the tool has
  succeeded in this run (the model is told to call it, and the tool is offered whatever tool
  retrieval chose): for the runs whose answers fail when they skip a tool that the successes of
  their kind call (mined as ``tool_skipped``). With ``"use_result": true`` it also refuses an
  answer that states none of what the tool's last successful call returned (its values other
  than the call's own arguments: a calculator's value, not the expression it was given), for
  the runs that call the tool and then answer without its result (mined as
  ``tool_result_unused``). A model that answers again without it after ANSWER_REFUSALS
  refusals keeps its answer: the rule asks, it does not loop.
- ``tool_subset``: ``{"tools": ["list_directory", "read_text_file"]}`` offers only those tools
  (and update_plan, which the base prompt asks every run to call): fewer tools, a shorter
  catalogue, fewer names to make up, which is what small models need. Applied by ``tools()``.
- ``tool_mode``: ``{"mode": "json"}`` or ``{"mode": "native"}``: how the run's model calls ask for
  tool calls (LLM_TOOL_MODE, per run). ``tool_mode(configured)`` says which mode to use.

The first five apply to one tool (``"tool"``); the last two to the run.
"""

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from feedback import saferegex

from .sandbox import SandboxError, file_named, one_file_named, resolve
from .tools import Tool

KINDS = (
    "tool_precondition",
    "parameter_rule",
    "retry_policy",
    "tool_disabled",
    "answer_precondition",
    "tool_subset",
    "tool_mode",
)
_RUN_KINDS = frozenset({"tool_subset", "tool_mode"})
TOOL_MODES = ("json", "native")
PARAMETER_ACTIONS = ("resolve_in_workspace", "file_name_as_path")
# The base prompt (prompts.py) tells every run to record a plan with it first: never taken away.
ALWAYS_OFFERED = frozenset({"update_plan"})
# How every refusal begins: the runtime's words to the model, which no answer may carry (answers.py).
REFUSAL_MARKER = "Guardrail:"
# How many answers an answer_precondition refuses in one run before it lets one stand.
ANSWER_REFUSALS = 2
_NUMBER = re.compile(r"[-+]?\d+(?:,\d{3})*(?:\.\d+)?")


def _scalars(value: Any) -> list:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _scalars(v)]
    if isinstance(value, list):
        return [s for v in value[:50] for s in _scalars(v)]
    return [value] if isinstance(value, int | float | str) and not isinstance(value, bool) else []


def result_values(result: Any, arguments: Any) -> list:
    """What a tool call returned, as an answer could state it: the result's numbers and short
    texts, less what the call was given (a calculator's value, not its expression)."""
    given = {str(v).strip().casefold() for v in _scalars(arguments)}
    found = [v for v in _scalars(result) if str(v).strip().casefold() not in given]
    return [v for v in found if not isinstance(v, str) or 0 < len(v.strip()) <= 200]


def last_results(steps) -> dict[str, list]:
    """Each tool's last successful call in a run's steps (in order), as result_values reads it."""
    return {s.tool_name: result_values(s.result, s.arguments) for s in steps if s.kind == "tool_call" and s.success}


def states_result(answer: str, values: list) -> bool:
    """Whether the answer states one of ``values``: a number equal to it (whatever its
    formatting: 1,001, 1001.0), or a text it contains."""
    numbers = [float(n.replace(",", "")) for n in _NUMBER.findall(answer)]
    folded = answer.casefold()
    for value in values:
        if isinstance(value, str) and value.strip().casefold() in folded:
            return True
        if isinstance(value, int | float) and any(abs(n - value) <= 1e-6 * max(1.0, abs(value)) for n in numbers):
            return True
    return False


def check_guardrails(guardrails: Any) -> list[str]:
    """What is wrong with a list of guardrails (empty when fine)."""
    if not isinstance(guardrails, list):
        return ["Guardrails must be a list."]
    problems = []
    for i, g in enumerate(guardrails, start=1):
        if not isinstance(g, dict) or g.get("type") not in KINDS:
            problems.append(f"Guardrail {i}: type must be one of {', '.join(KINDS)}.")
            continue
        if g["type"] == "tool_subset":
            tools = g.get("tools")
            if not isinstance(tools, list) or not tools or not all(isinstance(t, str) and t for t in tools):
                problems.append(f"Guardrail {i}: a tool subset needs 'tools' (a non-empty list of tool names).")
        if g["type"] == "tool_mode" and g.get("mode") not in TOOL_MODES:
            problems.append(f"Guardrail {i}: a tool mode needs 'mode': {' or '.join(TOOL_MODES)}.")
        if g["type"] not in _RUN_KINDS and (not isinstance(g.get("tool"), str) or not g["tool"]):
            problems.append(f"Guardrail {i}: name the tool it applies to.")
        if g["type"] == "answer_precondition" and not isinstance(g.get("use_result", False), bool):
            problems.append(f"Guardrail {i}: use_result is true or false.")
        if g["type"] == "tool_precondition" and not isinstance(g.get("requires"), str):
            problems.append(f"Guardrail {i}: a precondition needs 'requires' (a tool name).")
        if g["type"] == "parameter_rule":
            if not isinstance(g.get("param"), str):
                problems.append(f"Guardrail {i}: a parameter rule needs 'param'.")
            if "pattern" in g:
                if why := saferegex.problem(g["pattern"]):
                    problems.append(f"Guardrail {i}: 'pattern': {why}")
            elif g.get("action") not in PARAMETER_ACTIONS:
                problems.append(f"Guardrail {i}: give a 'pattern' or an action: {', '.join(PARAMETER_ACTIONS)}.")
            elif g["action"] == "file_name_as_path" and g.get("param") == "path":
                problems.append(f"Guardrail {i}: file_name_as_path moves a value into 'path': name the one it is in.")
        if g["type"] == "retry_policy":
            for key in ("timeout", "max_attempts"):
                if key in g and (not isinstance(g[key], int | float) or g[key] <= 0):
                    problems.append(f"Guardrail {i}: {key} must be a positive number.")
    return problems


@dataclass
class Decision:
    """What the engine does with one call: refuse it, or run it (possibly with new arguments)."""

    refusal: str = ""
    arguments: str = ""
    notes: list[str] = field(default_factory=list)


class Guardrails:
    def __init__(self, rules: list[dict], workspace: Path) -> None:
        self.rules = [r for r in rules if isinstance(r, dict) and r.get("type") in KINDS]
        self.workspace = workspace

    def __bool__(self) -> bool:
        return bool(self.rules)

    def _for(self, tool: str, kind: str) -> list[dict]:
        return [r for r in self.rules if r["type"] == kind and r.get("tool") == tool]

    def tools(self, tools: dict[str, Tool]) -> dict[str, Tool]:
        """The registry with disabled tools removed, retry policies applied, and only the tools of
        the tool subsets offered (of several subsets, the tools in all of them)."""
        allowed = self.allowed_tools(set(tools))
        out = {}
        for name, tool in tools.items():
            if self._for(name, "tool_disabled") or (allowed is not None and name not in allowed):
                continue
            for policy in self._for(name, "retry_policy"):
                tool = replace(tool, timeout=float(policy.get("timeout", tool.timeout)),
                               max_attempts=int(policy.get("max_attempts", tool.max_attempts)))  # fmt: skip
            out[name] = tool
        return out

    def allowed_tools(self, available: set[str]) -> set[str] | None:
        """The tools the subsets leave, or None when there is no subset. A subset that names no
        tool of this registry (renamed, or an MCP server gone) leaves the registry as it is: a
        rule learned elsewhere must not take every tool away."""
        subsets = [set(r.get("tools") or []) for r in self.rules if r["type"] == "tool_subset"]
        if not subsets:
            return None
        allowed = set.intersection(*subsets) & available
        return (allowed | ALWAYS_OFFERED) if allowed else None

    def tool_mode(self, configured: str) -> str:
        """The LLM_TOOL_MODE the run's model calls use, given the configured one ("auto",
        "native" or "json"). ``json`` rules: "json" (every chat endpoint can answer in JSON).
        ``native`` rules: "native" when that is configured, else "auto" (native tool calls, and
        JSON replies if the endpoint refuses tools, as "auto" does), so a rule never makes a run
        fail on an endpoint without tool support. Rules that disagree, or none: ``configured``."""
        modes = {r.get("mode") for r in self.rules if r["type"] == "tool_mode"} & set(TOOL_MODES)
        if modes == {"json"}:
            return "json"
        if modes == {"native"}:
            return "native" if configured == "native" else "auto"
        return configured

    def disabled(self, name: str) -> bool:
        return bool(self._for(name, "tool_disabled"))

    def required_before_answer(self, tools: dict[str, Tool]) -> dict[str, Tool]:
        """The tools of ``tools`` an answer_precondition requires: offered to the run whatever
        tool retrieval chose, since its answer waits for them."""
        required = {r["tool"] for r in self.rules if r["type"] == "answer_precondition"}
        return {name: tool for name, tool in tools.items() if name in required}

    def answer_refusal(
        self, succeeded: set[str], offered: set[str] | None = None, *, answer: str = "", results: dict | None = None
    ) -> str:
        """Why a final ``answer`` is refused now ("" when it is not): a required tool that has not
        succeeded in the run yet (of those ``offered`` to it, when given: a tool the registry no
        longer has cannot be asked for), or, for a rule that says so, whose last result
        (``results``: tool -> what result_values found in its last successful call) the answer
        does not state."""
        for rule in self.rules:
            tool = rule.get("tool")
            if rule["type"] != "answer_precondition" or (offered is not None and tool not in offered):
                continue
            if tool not in succeeded:
                return (
                    f"{REFUSAL_MARKER} call {tool} and use its result before you answer "
                    f"(a rule learned from earlier failures of tasks like this one)."
                )
            values = (results or {}).get(tool) or []
            if rule.get("use_result") and values and not states_result(answer, values):
                shown = ", ".join(str(v) for v in values[:5])
                return (
                    f"{REFUSAL_MARKER} your answer does not state what {tool} returned ({shown}): answer with "
                    f"its result, not with your own working (a rule learned from earlier failures)."
                )
        return ""

    def check(self, name: str, raw_arguments: str, succeeded: set[str]) -> Decision:
        """Apply the preconditions and parameter rules to a call before it runs."""
        if self.disabled(name):
            return Decision(refusal=f"{REFUSAL_MARKER} {name} is disabled for this kind of task. Use another tool.")
        for rule in self._for(name, "tool_precondition"):
            if rule["requires"] not in succeeded:
                return Decision(
                    refusal=f"{REFUSAL_MARKER} call {rule['requires']} successfully before {name} "
                    f"(a rule learned from earlier failures)."
                )
        try:
            arguments = json.loads(raw_arguments or "{}")
        except (ValueError, RecursionError):
            return Decision(arguments=raw_arguments)  # the invoker reports the bad JSON
        if not isinstance(arguments, dict):
            return Decision(arguments=raw_arguments)
        notes = []
        for rule in self._for(name, "parameter_rule"):
            value = arguments.get(rule["param"])
            if not isinstance(value, str):
                continue
            if "pattern" in rule and not self._allows(rule, value, notes):
                return Decision(
                    refusal=f"{REFUSAL_MARKER} {rule['param']}={value!r} breaks the rule {rule['pattern']!r}"
                    + (f" ({rule['message']})" if rule.get("message") else "")
                    + "."
                )
            if rule.get("action") == "resolve_in_workspace":
                found = self._resolve(value)
                if found and found != value:
                    notes.append(f"Guardrail: {rule['param']} {value!r} resolved to {found!r}.")
                    arguments[rule["param"]] = found
            if rule.get("action") == "file_name_as_path" and rule["param"] != "path":
                found = file_named(self.workspace, value)
                if found and (self._no_file(arguments) or self._same_file(arguments.get("path"), found)):
                    notes.append(f"Guardrail: {rule['param']} {value!r} names a file: passed as path {found!r}.")
                    del arguments[rule["param"]]
                    arguments["path"] = found
        return Decision(arguments=json.dumps(arguments), notes=notes)

    @staticmethod
    def _allows(rule: dict, value: str, notes: list[str]) -> bool:
        """Whether the value matches the rule's pattern. A pattern RE2 cannot run (saved before
        the check) is no rule: the call goes ahead, and the step says so."""
        pattern = rule["pattern"]
        compiled = saferegex.stored(pattern, where="A guardrail") if isinstance(pattern, str) else None
        if compiled is None:
            notes.append(f"Guardrail: the rule {pattern!r} for {rule['param']} cannot be used; not applied.")
            return True
        return compiled.search(saferegex.text(value)) is not None

    def _same_file(self, path: object, found: str) -> bool:
        # Both at once ("give exactly one", says the tool): the file's name as the text as well.
        return isinstance(path, str) and file_named(self.workspace, path) == found

    def _no_file(self, arguments: dict) -> bool:
        # A call may fill every parameter: path "" or "." beside the file's name as the text.
        path = arguments.get("path")
        if path is None or (isinstance(path, str) and not path.strip()):
            return True
        try:
            return isinstance(path, str) and resolve(self.workspace, path).is_dir()
        except SandboxError:
            return False

    def _resolve(self, path: str) -> str:
        try:
            if resolve(self.workspace, path).exists():
                return path
        except SandboxError:
            return path  # the tool refuses it with the sandbox's own message
        found = one_file_named(self.workspace, Path(path).name)
        return str(found.relative_to(self.workspace)) if found else path
