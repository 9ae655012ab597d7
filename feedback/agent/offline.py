"""The offline demo model: deterministic and rule-based, so the product runs with no network.

It is not an LLM and the UI says so. It reads the task and the observations in the
conversation like a model would, and plans tool calls for the three demo task families:
support-email triage, file analysis and arithmetic (in digits or in words: word_problems.py); a
task that asks for sub-agents over several named files delegates one file to each, and one that
names web addresses reads them with http_get (an operator allow-lists their hosts).
It knows nothing about strategies: any improvement the feedback loop brings must come from
mechanisms that work with any model.
"""

import json
import re
from dataclasses import dataclass
from typing import Any

from . import word_problems
from .llm import LLMReply, ToolCall

_EMAIL_TASK = re.compile(r"\b(e-?mails?|inbox|triage|tickets?)\b", re.I)
_REPLY_TASK = re.compile(r"\b(reply|respond|answer)\b", re.I)
_FILE_NAME = re.compile(r"[\w./-]*\w\.(?:txt|md|csv|log|json)\b")
_DIRECTORY = re.compile(r"\b([\w-]+)/")
_SUBAGENTS = re.compile(r"\bsub-?agents?\b", re.I)
_URL = re.compile(r"\bhttps?://[^\s<>\"'()]+[^\s<>\"'().,;:!?]")
MAX_URLS = 3
# How much of a page the answer quotes.
QUOTED_CHARS = 200

_LABELS = {
    "billing": ("invoice", "charge", "charged", "refund", "payment", "billing", "price"),
    "technical": ("error", "crash", "bug", "broken", "outage", "down", "fails", "500"),
    "account": ("password", "login", "log in", "account", "access", "locked", "2fa"),
}
_URGENT = ("urgent", "asap", "immediately", "outage", "critical", "down", "today", "cannot")
MAX_PARALLEL_READS = 8
# No digits in either: the rule evaluator's "the answer holds a number" check stays honest.
OUT_OF_SCOPE = (
    "I cannot do this task: the offline demo model handles support-email triage, file analysis, "
    "arithmetic and reading the web addresses a task names, and this task looks like none of them. "
    "Configure an LLM endpoint for anything else."
)
CANNOT_READ_ARITHMETIC = (
    "I could not read a calculation in this task. The offline demo model reads numbers in digits or "
    "English words and the usual operations (plus, minus, times, divided by, squared, the sum or the "
    "product of several numbers), not idioms, fractions or percentages. Write it with digits and "
    "+ - * /, or configure an LLM endpoint."
)
# What it says of a call a guardrail refused, in its own words.
REFUSED = "A rule of the runtime refused the call."
_PLANS = {
    "triage": ["List the inbox", "Read every email", "Label each email and flag the urgent ones"],
    "file": ["Read the file", "Analyse the text", "Write the summary"],
    "arithmetic": ["Compute the expression with the calculator", "Report the result"],
    "delegate": ["Give each file to a sub-agent", "Put their answers together"],
    "fetch": ["Fetch each address", "Report what each says"],
}


@dataclass(frozen=True)
class Observation:
    tool: str
    arguments: dict[str, Any]
    ok: bool
    result: Any
    error: str


def _observations(messages: list[dict[str, Any]]) -> list[Observation]:
    calls: dict[str, tuple[str, dict]] = {}
    seen: list[Observation] = []
    for message in messages:
        if message.get("role") == "assistant":
            for call in message.get("tool_calls") or []:
                try:
                    arguments = json.loads(call["function"]["arguments"] or "{}")
                except (json.JSONDecodeError, TypeError):
                    arguments = {}
                calls[call["id"]] = (call["function"]["name"], arguments)
        elif message.get("role") == "tool" and message.get("tool_call_id") in calls:
            name, arguments = calls[message["tool_call_id"]]
            try:
                payload = json.loads(message.get("content") or "{}")
            except json.JSONDecodeError:
                payload = {"ok": False, "error": message.get("content", "")}
            seen.append(
                Observation(
                    tool=name,
                    arguments=arguments,
                    ok=bool(payload.get("ok")),
                    result=payload.get("result"),
                    # A guardrail's refusal is the runtime's rule, not the tool's error: not quoted.
                    error=REFUSED if payload.get("refused_by") else payload.get("error", ""),
                )
            )
    return seen


def _reply_to(email: str) -> dict[str, str]:
    sender = re.search(r"^From:\s*(\S+@\S+)", email, re.M)
    subject = re.search(r"^Subject:\s*(.+)$", email, re.M)
    return {
        "to": sender.group(1) if sender else "unknown@example.com",
        "subject": f"Re: {subject.group(1).strip() if subject else 'your message'}",
        "body": "Thank you for your message. We have flagged it as urgent and are working on it now.",
    }


def _call(n: int, name: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=f"offline-{n}-{name}", name=name, arguments=json.dumps(arguments))


def _classify(text: str) -> tuple[str, bool]:
    lowered = text.lower()
    scores = {label: sum(lowered.count(w) for w in words) for label, words in _LABELS.items()}
    label = max(scores, key=scores.get) if max(scores.values()) else "other"
    return label, any(w in lowered for w in _URGENT)


class OfflineDemoModel:
    backend = "offline"
    name = "offline-demo"

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> LLMReply:
        task = next((m["content"] for m in messages if m.get("role") == "user"), "")
        seen = _observations(messages)
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        family, reply = self._decide(task, seen, turn)
        can_plan = any(t["function"]["name"] == "update_plan" for t in tools)
        if can_plan and reply.tool_calls and family:
            plan = self._plan(family, seen, turn)
            if plan:
                calls = [_call(turn * 100 + 99, "update_plan", steps=plan), *reply.tool_calls]
                return LLMReply(content=reply.content, tool_calls=calls)
        return reply

    @staticmethod
    def _plan(family: str, seen: list[Observation], turn: int) -> list[dict[str, str]] | None:
        """A plan on the first turn; a new one after a failed step (re-planning)."""
        work = [o for o in seen if o.tool != "update_plan"]
        if turn == 0:
            titles = _PLANS[family]
            return [{"title": t, "status": "in_progress" if i == 0 else "pending"} for i, t in enumerate(titles)]
        if work and not work[-1].ok:
            failed = f"{work[-1].tool} {work[-1].arguments.get('path', '')}".strip()
            return [
                {"title": failed, "status": "failed"},
                {"title": "Look around the workspace for another way", "status": "in_progress"},
                {"title": _PLANS[family][-1], "status": "pending"},
            ]
        return None

    def _decide(self, task: str, seen: list[Observation], turn: int) -> tuple[str, LLMReply]:
        # First: an address's path may end like a file name (status.json) or hold an e-mail's words.
        if urls := list(dict.fromkeys(_URL.findall(task)))[:MAX_URLS]:
            return "fetch", self._fetch(urls, seen, turn)
        if _SUBAGENTS.search(task) and len(set(_FILE_NAME.findall(task))) > 1:
            return "delegate", self._delegate(task, seen, turn)
        if _EMAIL_TASK.search(task):
            return "triage", self._triage(task, seen, turn)
        if _FILE_NAME.search(task) or re.search(r"\b(summari[sz]e|word count|count)\b", task, re.I):
            return "file", self._file_analysis(task, seen, turn)
        expression = word_problems.expression(task)
        if expression:
            return "arithmetic", self._arithmetic(expression, seen, turn)
        if word_problems.looks_like_arithmetic(task):
            # Arithmetic it cannot read: say what it does read, not that it does no arithmetic.
            return "", LLMReply(content=CANNOT_READ_ARITHMETIC)
        return "", LLMReply(content=OUT_OF_SCOPE)

    # --- sub-agents: one named file each ---------------------------------------------------
    def _delegate(self, task: str, seen: list[Observation], turn: int) -> LLMReply:
        delegated = [o for o in seen if o.tool == "delegate"]
        if not delegated:
            files = list(dict.fromkeys(_FILE_NAME.findall(task)))
            calls = [
                _call(turn * 100 + i, "delegate", task=f"Summarise {name} and count its words", kind="file_analysis")
                for i, name in enumerate(files)
            ]
            return LLMReply(content=f"Giving {len(files)} files to sub-agents.", tool_calls=calls)
        lines = [f"- {o.arguments.get('task', '')}: {o.result['answer'] if o.ok else o.error}" for o in delegated]
        done = sum(o.ok for o in delegated)
        return LLMReply(content="\n".join([f"The sub-agents answered {done} of {len(delegated)}:", *lines]))

    # --- web addresses: each read once with http_get -------------------------------------------
    def _fetch(self, urls: list[str], seen: list[Observation], turn: int) -> LLMReply:
        fetched = {o.arguments.get("url"): o for o in seen if o.tool == "http_get"}
        if not fetched:
            calls = [_call(turn * 100 + i, "http_get", url=url) for i, url in enumerate(urls)]
            return LLMReply(content=f"Fetching {len(urls)} address(es).", tool_calls=calls)
        lines, read = [], 0
        for url in urls:
            obs = fetched.get(url)
            if obs is None or not obs.ok:
                lines.append(f"- {url}: could not be read ({obs.error if obs else 'not fetched'})")
                continue
            text = " ".join(str(obs.result.get("text", "")).split())
            quoted = text[:QUOTED_CHARS] + ("…" if len(text) > QUOTED_CHARS else "")
            kind = obs.result.get("content_type") or "no type"
            lines.append(f"- {url}: HTTP {obs.result.get('status')}, {kind}: {quoted}")
            read += 1
        return LLMReply(content="\n".join([f"Read {read} of {len(urls)} address(es):", *lines]))

    # --- support-email triage -------------------------------------------------------------
    def _triage(self, task: str, seen: list[Observation], turn: int) -> LLMReply:
        listed = next((o for o in seen if o.tool == "list_directory"), None)
        folder = _DIRECTORY.search(task) or re.search(r"(inbox)", task, re.I)
        folder_name = folder.group(1) if folder else "inbox"
        if listed is None:
            return LLMReply(
                content=f"Plan: list {folder_name}/, read every email, label each and flag urgent ones.",
                tool_calls=[_call(turn, "list_directory", path=folder_name)],
            )
        if not listed.ok:
            return LLMReply(content=f"I could not open the inbox: {listed.error}")
        files = [
            f"{listed.arguments.get('path', folder_name).rstrip('/')}/{e['name']}"
            for e in listed.result["entries"]
            if e["type"] == "file"
        ]
        read = {o.arguments.get("path"): o for o in seen if o.tool == "read_text_file"}
        unread = [f for f in files if f not in read]
        if unread:
            batch = unread[:MAX_PARALLEL_READS]
            return LLMReply(
                content=f"Reading {len(batch)} email(s).",
                tool_calls=[_call(turn * 100 + i, "read_text_file", path=p) for i, p in enumerate(batch)],
            )
        lines, urgent = [], []
        for path in files:
            obs = read[path]
            if not obs.ok:
                lines.append(f"- {path}: unreadable ({obs.error})")
                continue
            label, is_urgent = _classify(obs.result["text"])
            if is_urgent:
                urgent.append(obs.result["text"])
            lines.append(f"- {path}: {label}{' — URGENT' if is_urgent else ''}")
        if not files:
            return LLMReply(content=f"The folder {folder_name}/ holds no emails.")
        summary = f"Triaged {len(files)} email(s); {len(urgent)} urgent."
        if _REPLY_TASK.search(task):
            replies = [o for o in seen if o.tool == "send_reply"]
            if not replies and urgent:
                return LLMReply(
                    content=f"Replying to the {len(urgent)} urgent sender(s).",
                    tool_calls=[
                        _call(turn * 100 + i, "send_reply", **_reply_to(text)) for i, text in enumerate(urgent)
                    ],
                )
            sent = sum(o.ok for o in replies)
            summary += f" Replied to {sent}; {len(replies) - sent} reply(ies) not sent."
        return LLMReply(content="\n".join([summary, *lines]))

    # --- file analysis --------------------------------------------------------------------
    def _file_analysis(self, task: str, seen: list[Observation], turn: int) -> LLMReply:
        wanted = _FILE_NAME.findall(task)
        listings = [o for o in seen if o.tool == "list_directory" and o.ok]
        if not wanted:
            if not listings:
                return LLMReply(
                    content="No file named; listing the workspace first.",
                    tool_calls=[_call(turn, "list_directory", path=".")],
                )
            wanted = [e["name"] for e in listings[-1].result["entries"] if e["name"].endswith(".txt")][:1]
            if not wanted:
                return LLMReply(content="The workspace holds no text file to analyse.")
        path = wanted[0]
        reads = [o for o in seen if o.tool == "read_text_file"]
        good_read = next((o for o in reads if o.ok), None)
        if good_read is None:
            if not reads:
                return LLMReply(
                    content=f"Plan: read {path}, analyse it, then summarise.",
                    tool_calls=[_call(turn, "read_text_file", path=path)],
                )
            # The file was not where the task said: look around once, then try the match.
            if not listings:
                parent = path.rsplit("/", 1)[0] if "/" in path else "."
                return LLMReply(
                    content=f"{reads[-1].error} Listing {parent} to find it.",
                    tool_calls=[_call(turn, "list_directory", path=parent)],
                )
            base = path.rsplit("/", 1)[-1]
            listing = listings[-1]
            candidates = [e["name"] for e in listing.result["entries"] if e["type"] == "file" and e["name"] == base]
            # A path refused for another reason than "not there" is worth reading once it is seen.
            tried = {o.arguments.get("path") for o in reads if "No such file" in o.error}
            prefix = listing.arguments.get("path", ".").strip("./")
            options = [f"{prefix}/{c}" if prefix else c for c in candidates]
            options = [o for o in options if o not in tried]
            if options:
                return LLMReply(tool_calls=[_call(turn, "read_text_file", path=options[0])])
            return LLMReply(content=f"I could not find {path}: {reads[-1].error}")
        analysis = next((o for o in seen if o.tool == "analyze_text"), None)
        read_path = good_read.arguments["path"]
        if analysis is None:
            return LLMReply(tool_calls=[_call(turn, "analyze_text", path=read_path)])
        if not analysis.ok:
            return LLMReply(content=f"I could not analyse {read_path}: {analysis.error}")
        stats = analysis.result
        return LLMReply(
            content=(
                f"Summary of {read_path}: {stats['first_sentence']} "
                f"It has {stats['words']} words in {stats['sentences']} sentences "
                f"and {stats['lines']} lines. Frequent words: {', '.join(stats['top_words'][:5])}."
            )
        )

    # --- arithmetic (read by word_problems) -------------------------------------------------
    def _arithmetic(self, expression: str, seen: list[Observation], turn: int) -> LLMReply:
        done = next((o for o in seen if o.tool == "calculator"), None)
        if done is None:
            return LLMReply(
                content=f"Computing {expression} with the calculator.",
                tool_calls=[_call(turn, "calculator", expression=expression)],
            )
        if not done.ok:
            return LLMReply(content=f"I could not compute {expression}: {done.error}")
        return LLMReply(content=f"{expression} = {done.result['value']}")
