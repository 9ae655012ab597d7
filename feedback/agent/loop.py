"""The agent loop the worker runs: perceive, plan, act, observe, until an answer or a limit.

Every step is written to the database as it happens, and the conversation is rebuilt from
those rows, so a run can resume from its last recorded step.
"""

import json
import logging
import shutil
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from itertools import groupby
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from feedback.models import Run, Step, StepAttempt

from .errors import error_signature
from .invoker import Outcome, invoke
from .llm import ChatModel, LLMError, LLMReply, ToolCall, get_model
from .prompts import build_system_prompt
from .tools import Tool, ToolContext, enabled_tools

logger = logging.getLogger(__name__)

MAX_CONSECUTIVE_MODEL_ERRORS = 3


def sandbox_path(run: Run) -> Path:
    return Path(settings.RUN_SANDBOXES_ROOT) / str(run.pk)


def prepare_sandbox(run: Run) -> Path:
    """The run's own copy of its task's workspace (kept on resume)."""
    target = sandbox_path(run)
    if target.exists():
        return target
    source = run.task.workspace.path if run.task.workspace_id else None
    if source is not None and source.is_dir():
        # symlinks=True copies links as links, so one pointing outside is refused by the
        # sandbox instead of silently copying the outside file in.
        shutil.copytree(source, target, symlinks=True)
    else:
        target.mkdir(parents=True, exist_ok=True)
    return target


def _assistant_message(thought: str, calls: list[Step]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": thought or None}
    if calls:
        message["tool_calls"] = [
            {
                "id": c.tool_call_id,
                "type": "function",
                "function": {
                    "name": c.tool_name,
                    "arguments": c.arguments if isinstance(c.arguments, str) else json.dumps(c.arguments),
                },
            }
            for c in calls
        ]
    return message


def conversation(run: Run) -> list[dict[str, Any]]:
    """The messages the model sees, rebuilt from the recorded steps."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": run.system_prompt},
        {"role": "user", "content": run.task.text},
    ]
    for _, group in groupby(run.steps.order_by("index"), key=lambda s: s.turn):
        steps = list(group)
        thought = "\n".join(s.thought for s in steps if s.kind in (Step.Kind.THOUGHT, Step.Kind.FINAL))
        calls = [s for s in steps if s.kind == Step.Kind.TOOL_CALL]
        if thought or calls:
            messages.append(_assistant_message(thought, calls))
        for call in calls:
            messages.append(
                {"role": "tool", "tool_call_id": call.tool_call_id, "content": observation_of(call)}
            )
        for note in steps:
            if note.kind in (Step.Kind.REFLECTION, Step.Kind.MODEL_ERROR):
                messages.append({"role": "user", "content": note.thought})
    return messages


def observation_of(step: Step) -> str:
    if step.success:
        return json.dumps({"ok": True, "result": step.result}, ensure_ascii=False)
    return json.dumps({"ok": False, "error": step.error}, ensure_ascii=False)


class AgentLoop:
    def __init__(self, run: Run, *, model: ChatModel | None = None, tools: dict[str, Tool] | None = None):
        self.run = run
        self.model = model or get_model()
        self.tools = tools if tools is not None else enabled_tools()
        self.workspace = prepare_sandbox(run)
        self.context = ToolContext(run_id=run.pk, workspace=self.workspace)

    # --- persistence ----------------------------------------------------------------------
    def _next_index(self) -> int:
        return Run.objects.values_list("step_count", flat=True).get(pk=self.run.pk)

    def _record(self, **fields: Any) -> Step:
        with transaction.atomic():
            index = self._next_index()
            step = Step.objects.create(run=self.run, index=index, **fields)
            Run.objects.filter(pk=self.run.pk).update(
                step_count=F("step_count") + 1,
                heartbeat_at=timezone.now(),
                tokens_in=F("tokens_in") + fields.get("tokens_in", 0),
                tokens_out=F("tokens_out") + fields.get("tokens_out", 0),
            )
        return step

    def _record_tool_call(self, turn: int, call: ToolCall, outcome: Outcome) -> Step:
        with transaction.atomic():
            step = self._record(
                turn=turn,
                kind=Step.Kind.TOOL_CALL,
                tool_name=call.name[:100],
                tool_call_id=call.id[:100],
                arguments=outcome.arguments,
                result=outcome.result if outcome.ok else None,
                error=outcome.error,
                error_class=outcome.error_class,
                error_signature=""
                if outcome.ok
                else error_signature(call.name, outcome.error_class, outcome.error),
                success=outcome.ok,
                started_at=outcome.started_at,
                finished_at=outcome.finished_at,
                duration_ms=int((outcome.finished_at - outcome.started_at).total_seconds() * 1000),
                attempts=max(1, len(outcome.attempts)),
            )
            StepAttempt.objects.bulk_create(
                StepAttempt(
                    step=step,
                    number=a.number,
                    started_at=a.started_at,
                    duration_ms=a.duration_ms,
                    error=a.error,
                    error_class=a.error_class,
                    retryable=a.retryable,
                )
                for a in outcome.attempts
            )
        return step

    def _finish(self, status: str, *, output: str = "", error: str = "") -> None:
        Run.objects.filter(pk=self.run.pk).update(
            status=status, final_output=output, error=error, finished_at=timezone.now()
        )
        self.run.refresh_from_db()
        logger.info("run %s finished: %s %s", self.run.pk, status, error)
        from feedback.tasks import run_evaluate_task  # late: feedback.tasks imports this module

        run_evaluate_task.delay_on_commit(self.run.pk)

    # --- the loop -------------------------------------------------------------------------
    def _prepare_prompt(self) -> None:
        if self.run.system_prompt:
            return  # resumed: keep the exact prompt the run started with
        self.run.system_prompt = build_system_prompt()
        self.run.llm_backend = self.model.backend
        self.run.model_name = self.model.name
        self.run.tools_offered = sorted(self.tools)
        self.run.save(update_fields=["system_prompt", "llm_backend", "model_name", "tools_offered"])

    def _limit_reached(self) -> str:
        run = Run.objects.only("step_count", "cancel_requested", "started_at").get(pk=self.run.pk)
        if run.cancel_requested:
            return "cancelled"
        if run.step_count >= settings.AGENT_MAX_STEPS:
            return f"Step limit reached ({settings.AGENT_MAX_STEPS} steps) without a final answer."
        if run.started_at and timezone.now() - run.started_at > timedelta(seconds=settings.AGENT_MAX_SECONDS):
            return f"Time limit reached ({settings.AGENT_MAX_SECONDS} s) without a final answer."
        return ""

    def execute(self) -> None:
        self._prepare_prompt()
        specs = [t.spec() for t in self.tools.values()]
        turn = self.run.steps.order_by("-index").values_list("turn", flat=True).first() or 0
        model_errors = 0
        while True:
            limit = self._limit_reached()
            if limit == "cancelled":
                return self._finish(Run.Status.CANCELLED, error="Cancelled by a user.")
            if limit:
                return self._finish(Run.Status.FAILED, error=limit)
            turn += 1
            try:
                reply = self.model.complete(conversation(self.run), specs)
            except LLMError as exc:
                self._record(
                    turn=turn,
                    kind=Step.Kind.MODEL_ERROR,
                    thought=f"The model call failed: {exc}",
                    error=str(exc),
                    error_class="LLMError",
                    success=False,
                )
                return self._finish(Run.Status.FAILED, error=f"The model could not be reached: {exc}")
            if not reply.tool_calls and not reply.content.strip():
                model_errors += 1
                self._record(
                    turn=turn,
                    kind=Step.Kind.MODEL_ERROR,
                    success=False,
                    error="Empty reply",
                    error_class="EmptyReply",
                    tokens_in=reply.tokens_in,
                    tokens_out=reply.tokens_out,
                    thought="Your last reply was empty. Call a tool, or give the final answer.",
                )
                if model_errors >= MAX_CONSECUTIVE_MODEL_ERRORS:
                    return self._finish(Run.Status.FAILED, error="The model kept replying with nothing.")
                continue
            model_errors = 0
            if not reply.tool_calls:
                self._record(
                    turn=turn,
                    kind=Step.Kind.FINAL,
                    thought=reply.content,
                    success=True,
                    tokens_in=reply.tokens_in,
                    tokens_out=reply.tokens_out,
                )
                return self._finish(Run.Status.SUCCEEDED, output=reply.content)
            self._act(turn, reply)

    def _act(self, turn: int, reply: LLMReply) -> None:
        if reply.content.strip():
            self._record(
                turn=turn,
                kind=Step.Kind.THOUGHT,
                thought=reply.content,
                tokens_in=reply.tokens_in,
                tokens_out=reply.tokens_out,
            )
        available = list(self.tools)
        calls = reply.tool_calls
        # Several calls in one reply run concurrently; their steps are written in call order.
        with ThreadPoolExecutor(max_workers=min(8, len(calls))) as pool:
            outcomes = list(
                pool.map(
                    lambda c: invoke(self.tools.get(c.name), c.name, c.arguments, self.context, available),
                    calls,
                )
            )
        for call, outcome in zip(calls, outcomes, strict=True):
            self._record_tool_call(turn, call, outcome)


def execute_run(run_id: int) -> None:
    """Claim a queued run and drive it to the end. Returns quietly if another worker has it."""
    claimed = Run.objects.filter(pk=run_id, status=Run.Status.QUEUED).update(
        status=Run.Status.RUNNING, started_at=timezone.now(), heartbeat_at=timezone.now()
    )
    if claimed != 1:
        return
    run = Run.objects.select_related("task", "task__workspace").get(pk=run_id)
    try:
        AgentLoop(run).execute()
    except Exception as exc:
        logger.exception("run %s crashed", run_id)
        Run.objects.filter(pk=run_id, status=Run.Status.RUNNING).update(
            status=Run.Status.FAILED,
            error=f"Internal error: {type(exc).__name__}: {exc}",
            finished_at=timezone.now(),
        )
