"""What proposals say, by the kind of pattern: the wording tables the templates write titles and
guidance from (proposals.py), so that a title and its guidance come from one entry and agree."""

import re

from feedback.evaluation.reference import OVERREACH

# Evaluator feedback by what it says, so the guidance is about the kind of shortfall, not about
# one task: (category, how to recognise it, what answers do, what to do instead).
_FEEDBACK_CATEGORIES = (
    (
        "gives_up",
        re.compile(r"gives? up|gave up|refus|the run ended", re.I),
        "answers give up",
        "Final answers give up on the task (“I could not…”).",
        "In {kind} tasks, do not end with an answer that gives up while a tool can still help: when a call "
        "fails, read its error, correct the arguments or look around the workspace (list the folders, "
        "including sub-folders), and then answer what was asked.",
    ),
    (
        "reference",
        re.compile(r"expected|does not match|does not contain|missing labels", re.I),
        "answers miss the expected result",
        "Final answers do not give the result the task expects.",
        "In {kind} tasks, before giving the final answer, check it against each thing the task asks for "
        "(every quantity, label, name and unit it requests), work it out from the tool results rather than "
        "guessing, and state the result itself in the answer.",
    ),
    (
        "length",
        re.compile(r"characters|too short|too long|number of words|word count|length", re.I),
        "answers have the wrong length",
        "Final answers are shorter or longer than the task asks.",
        "In {kind} tasks, give the final answer at the length the task asks for: count with a tool where one "
        "can, rather than estimate, and do not stop at a fragment.",
    ),
    (
        "format",
        re.compile(r"\bmatches\b|format|json", re.I),
        "answers are not in the form asked for",
        "Final answers are not in the form the task asks for.",
        "In {kind} tasks, give the final answer in exactly the form the task asks for (a number, a list, "
        "labels, a sentence), without other text around it.",
    ),
    (
        "keyword",
        re.compile(r"mentions|missing", re.I),
        "answers leave out what was asked",
        "Final answers leave out items the task asks about.",
        "In {kind} tasks, name in the final answer each item the task asks about, in the task's own words.",
    ),
)
# The reference's shortfall of naming what the task's criterion leaves out (evaluation/reference.py
# OVERREACH: a triage that flags every email names the urgent ones too), apart from its others.
_FEEDBACK_OVERREACH = (
    "overreach",
    re.compile(rf"{re.escape(OVERREACH)}|should not be named", re.I),
    "answers name items that do not qualify",
    "Final answers name items the task's criterion leaves out, besides or instead of those it picks.",
    "In {kind} tasks, name only the items that meet the task's criterion: read each candidate, decide for "
    "each one whether it meets it, and leave out those that do not. Naming every candidate is a wrong answer.",
)
_FEEDBACK_OTHER = (
    "other",
    None,
    "answers score low",
    "Final answers draw low scores.",
    "In {kind} tasks, re-read the task before answering and make sure the final answer addresses every "
    "part of it, using what the tools showed.",
)


def feedback_category(evaluator_kind: str, feedback: str) -> tuple:
    if evaluator_kind == "reference":
        return _FEEDBACK_OVERREACH if _FEEDBACK_OVERREACH[1].search(feedback) else _FEEDBACK_CATEGORIES[1]
    return next((c for c in _FEEDBACK_CATEGORIES if c[1].search(feedback)), _FEEDBACK_OTHER)


# Malformed and empty replies (mining's reply failures): (title, what the model does, the format
# reminder). The reminder says how to reply; it never quotes a reply. The JSON ones say "when asked
# to reply in JSON": with a tool-mode switch to native calls the run is not, unless the endpoint
# refuses tools and it falls back to JSON replies.
_REPLY_FAILURES = {
    "invalid_json": (
        "Replies are not valid JSON in {kind} tasks",
        "Replies with text that is not one valid JSON object (prose, code fences, a cut-off object).",
        "When asked to reply in JSON, reply with exactly one JSON object and nothing else: no text before or "
        "after it, no code fences, double quotes around every key and string, every bracket closed. To call tools: "
        '{{"tool_calls": [{{"name": "<tool>", "arguments": {{...}}}}]}}; when done: {{"final_answer": "..."}}.',
    ),
    "bad_tool_calls": (
        "Replies have unusable tool calls in {kind} tasks",
        "Replies with JSON that has neither a usable 'tool_calls' list nor a 'final_answer'.",
        'When asked to reply in JSON, each reply is either {{"tool_calls": [...]}} with at least one call, each '
        'call an object with "name" (one of the listed tools) and "arguments" (an object), or '
        '{{"final_answer": "..."}} with the answer as a string.',
    ),
    "empty_reply": (
        "Empty replies in {kind} tasks",
        "Replies with nothing: no text and no tool call.",
        "Never reply with an empty message: every reply either calls one of the listed tools or gives the "
        "final answer as text.",
    ),
    "unknown_tool": (
        "Calls to tools that do not exist in {kind} tasks",
        "Calls tools by names that are not in the list of tools.",
        "Call only the tools listed for this task, with exactly their names; never invent a tool. If no listed "
        "tool fits, work with the ones there are, or give the final answer.",
    ),
    "malformed_arguments": (
        "Tool arguments are not a JSON object in {kind} tasks",
        "Gives tool arguments that are not one valid JSON object.",
        "Give each tool call's arguments as one JSON object with double-quoted keys and strings, matching "
        "the tool's parameters, and nothing else.",
    ),
    "invalid_arguments": (
        "Tool arguments break the tools' parameters in {kind} tasks",
        "Gives tool arguments with missing, misnamed or mistyped parameters.",
        "Give each tool exactly the parameters its schema declares: every required one, with the names and "
        "types it lists (strings in quotes, numbers without), and no others.",
    ),
}


# An error signature's title and guidance, from its tool and error class (and what kind of
# error the message is): (title, guidance). Both say the same advice about the same tool, so a
# title never contradicts its guidance; neither quotes the message (the guidance adds it,
# generalised, as the failure it avoids).
_ERROR_ADVICE = {
    "missing_file": (
        "Check file paths before calling {tool} in {kind} tasks",
        "Before calling {tool} in {kind} tasks, check file paths: list the directories, including "
        "sub-folders, and call {tool} with the exact path they show.",
    ),
    "ToolTimeout": (
        "Give {tool} fewer, smaller calls in {kind} tasks",
        "In {kind} tasks, give {tool} fewer, smaller calls: one timed-out call is not a reason to repeat "
        "the same call at once.",
    ),
    "Refused": (
        "Do without {tool} in {kind} tasks",
        "In {kind} tasks, do without {tool}: it is refused there; use the other tools listed.",
    ),
    "other": (
        "Check {tool}'s arguments before calling it in {kind} tasks",
        "In {kind} tasks, check {tool}'s arguments before calling it: compare them with what earlier "
        "observations showed and use exact values from them.",
    ),
}


def error_advice(tool: str, error_class: str, example: str) -> tuple[str, str]:
    if re.search(r"no such file|not found|does not exist", example, re.I) or "NotFound" in error_class:
        return _ERROR_ADVICE["missing_file"]
    return _ERROR_ADVICE.get(error_class, _ERROR_ADVICE["other"])
