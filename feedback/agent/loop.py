"""The agent loop the worker runs: perceive, plan, act, observe, reflect, until a final
answer, a limit, a stop, or a sensitive call that waits for a person.

Every step is written as it happens and the conversation is rebuilt from the steps when a run
starts, so a run resumes from its last recorded step after its worker is killed or after a
confirmation; while it runs, each turn's messages are appended to it.
"""

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property

from django.conf import settings
from django.db import InterfaceError, OperationalError, transaction
from django.db.models import Q
from django.utils import timezone

from feedback import lifecycle
from feedback.logging import current_run, current_step
from feedback.models import Run, Step, Task
from feedback.models.step import SUBAGENT_TOOL
from feedback.privacy import mask_text
from feedback.quota import folder_bytes
from feedback.strategies import injection as strategy_injection

from .answers import GUARDRAIL_REFUSED, unusable
from .confirmations import Paused, ask_for_confirmation, needs_confirmation, resume_confirmed_calls
from .conversation import Conversation, recorded_steps
from .guardrails import ANSWER_REFUSALS, Decision, Guardrails, last_results
from .invoker import Outcome, invoke, refused
from .lease import Heartbeat, LeaseLost, claim_run, load_run, new_lease
from .llm import ChatModel, ModelCall, ToolCall, apply_tool_mode, call_model, get_model
from .recorder import Recorder, retrying
from .reflection import reflect
from .retrieval import select_tools
from .sandbox import prepare_sandbox
from .tools import Tool, ToolContext, enabled_tools
from .tools.mcp import release_run

logger = logging.getLogger(__name__)

MAX_CONSECUTIVE_MODEL_ERRORS = 3


class AgentLoop:
    def __init__(
        self,
        run: Run,
        *,
        lease: str,
        model: ChatModel | None = None,
        tools: dict[str, Tool] | None = None,
    ):
        self.run = run
        self.record = Recorder(run, lease)
        self.lease = lease
        self.model = model or get_model()
        self._model_given = model is not None
        self.all_tools = tools if tools is not None else enabled_tools()
        self.tools = self.all_tools
        self.context = ToolContext(run_id=run.pk, workspace=prepare_sandbox(run))
        self.started = time.monotonic()

    # --- set-up ---------------------------------------------------------------------------
    def _prepare(self) -> None:
        if self.run.system_prompt:
            # Resumed: keep the exact prompt, strategies and tools the run started with.
            injection = strategy_injection.recorded(self.run)
            self._use_injection(injection)
            offered = set(self.run.tools_offered)
            self.tools = self.guardrails.tools({n: t for n, t in self.all_tools.items() if n in offered})
            return
        injection = strategy_injection.select(self.run)
        strategy_injection.record(self.run, injection)
        self._use_injection(injection)
        offerable = self.guardrails.tools(self.all_tools)
        if self._depth >= settings.SUBAGENT_MAX_DEPTH:
            # A delegation would only be refused: not offered, so a model never spends a turn on
            # it (SUBAGENT_MAX_DEPTH=0 turns sub-agents off; a small model delegated everything).
            offerable = {name: tool for name, tool in offerable.items() if name != SUBAGENT_TOOL}
        self.tools, method = select_tools(self.run.task.text, offerable)
        self.tools |= self.guardrails.required_before_answer(offerable)
        self.record.update_run(
            system_prompt=injection.system_prompt_text(),
            llm_backend=self.model.backend,
            model_name=self.model.name,
            tools_offered=sorted(self.tools),
            tool_selection=method,
        )

    def _use_injection(self, injection: strategy_injection.Injection) -> None:
        if injection.model and not self._model_given:
            self.model = get_model(injection.model)  # an experiment's other model, this run only
        rules = injection.guardrails
        self.guardrails = Guardrails(rules, self.context.workspace)
        # A strategy may switch how the model is asked to call tools (native or JSON replies), for
        # this run only: the model is made per run.
        apply_tool_mode(self.model, self.guardrails.tool_mode)

    def _limit_reached(self) -> str:
        if lifecycle.cancel_requested(run_id=self.run.pk):
            return "cancelled"
        if self.record.progress() >= settings.AGENT_MAX_STEPS:
            return f"Step limit reached ({settings.AGENT_MAX_STEPS} steps) without a final answer."
        if time.monotonic() - self.started > settings.AGENT_MAX_SECONDS:
            return f"Time limit reached ({settings.AGENT_MAX_SECONDS} s) without a final answer."
        return ""

    def _finish(self, status: str, *, output: str = "", error: str = "", step: dict | None = None) -> None:
        """End the run (feedback/lifecycle.py); ``step``: the fields of its last step, written with
        its end (one transaction, under the lease)."""
        # The loop is the plan's only writer: this is the stored one.
        fields = {"plan": _plan_at_end(self.run.plan or [], status)}
        if self.run.parent_id is None:
            # What the run (and its sub-agents, in the same folder) left: its quota and the metrics read it.
            fields["sandbox_bytes"] = folder_bytes(self.context.workspace)

        def write(ends: dict) -> None:
            if step is None:
                self.record.update_run(**ends)
            else:
                self.record.step(**step, run_fields=ends)

        lifecycle.run_end(
            run_id=self.run.pk, status=status, output=output, error=error, lease=self.lease, write=write, fields=fields
        )

    # --- the loop -------------------------------------------------------------------------
    def execute(self) -> None:
        # _prepare writes the system prompt before any step or confirmation exists: a run
        # without one has neither, and its first turn needs no reads of them.
        fresh = not self.run.system_prompt
        if fresh:
            self.record.start_fresh()
        self._prepare()
        self.record.steps = [] if fresh else recorded_steps(self.run)
        if not fresh:
            resume_confirmed_calls(run=self.run, record=self.record, context=self.context, tools=self.tools)
        history = Conversation(self.run, self.record.steps)
        specs = [t.spec() for t in self.tools.values()]
        turn = self.record.steps[-1].turn if self.record.steps else 0
        model_errors = 0
        while True:
            limit = self._limit_reached()
            if limit == "cancelled":
                return self._finish(Run.Status.CANCELLED, error="Cancelled by a user.")
            if limit:
                return self._finish(Run.Status.FAILED, error=limit)
            turn += 1
            current_step.set(None)
            # Every model call is its turn's first step, timed: a thought (it called tools), the
            # final answer, or a model error.
            called = call_model(self.model, history.messages(), specs)
            if called.error is not None:
                tried = f"after {len(called.attempts)} attempt(s): {called.error}"
                return self._finish(
                    Run.Status.FAILED,
                    error=f"The model could not be reached {tried}",
                    step=dict(
                        **called.step_fields(), turn=turn, kind=Step.Kind.MODEL_ERROR, success=False,
                        error=str(called.error), error_class="LLMError", thought=f"The model call failed {tried}",
                    ),
                )  # fmt: skip
            reply = called.reply
            problem, error_class = unusable(reply, self.record.steps)
            if problem:
                model_errors += 1
                step = dict(
                    **called.step_fields(), turn=turn, kind=Step.Kind.MODEL_ERROR, success=False,
                    error=problem, error_class=error_class,
                    thought=f"{problem} Call a tool, or give the final answer.",
                    result={"raw": reply.content[:2000]} if reply.content else None,
                )  # fmt: skip
                if model_errors >= MAX_CONSECUTIVE_MODEL_ERRORS:
                    return self._finish(
                        Run.Status.FAILED, error=f"The model gave {model_errors} unusable replies in a row.", step=step
                    )
                self.record.step(**step)
                continue
            model_errors = 0
            if not reply.tool_calls and (refusal := self._answer_refused(reply.content)):
                # Not a reply the loop cannot use: an answer a guardrail holds back until a tool
                # has run (guardrails.py), so it is a refusal, not an error, and no model error.
                self.record.step(
                    **called.step_fields(),
                    turn=turn,
                    kind=Step.Kind.MODEL_ERROR,
                    success=False,
                    error=refusal,
                    error_class=GUARDRAIL_REFUSED,
                    thought=refusal,
                    result={"raw": reply.content[:2000]},
                )
                continue
            if not reply.tool_calls:
                return self._finish(
                    Run.Status.SUCCEEDED,
                    output=reply.content,
                    step=dict(**called.step_fields(), turn=turn, kind=Step.Kind.FINAL, thought=reply.content,
                              success=True),
                )  # fmt: skip
            failed = self._act(turn, called)
            reflection = reflect(self.record.steps, failed, tools=self.all_tools)
            if reflection is not None:
                step = dict(turn=turn, kind=Step.Kind.REFLECTION, thought=reflection.text, started_at=timezone.now())
                if reflection.give_up:
                    # The plan's item in progress fails with the run (_plan_at_end).
                    return self._finish(Run.Status.FAILED, error=reflection.give_up, step=step)
                self.record.step(**step, run_fields=self._plan_failed() if failed else {})

    def _act(self, turn: int, called: ModelCall) -> list[Step]:
        reply = called.reply
        # The model call's step (its times, tokens and so its cost, attempts), written with the
        # turn's first outcomes, in their transaction; on its own before an engine call or a pause.
        fields = called.step_fields()
        lead = (fields.pop("tries"), {**fields, "turn": turn, "kind": Step.Kind.THOUGHT, "thought": reply.content})
        waiting = [c for c in reply.tool_calls if needs_confirmation(c, self.tools)]
        engine = [c for c in reply.tool_calls if c not in waiting and self._is_engine(c)]
        pooled = [c for c in reply.tool_calls if c not in waiting and c not in engine]
        outcomes: dict[str, Outcome] = {}
        decisions = self._guard(pooled)
        runnable = [c for c in pooled if not decisions[c.id].refusal]
        if len(runnable) == 1:
            # Nothing to overlap: a fresh thread per turn would also open a fresh cache
            # connection (the cache client is per thread) for the breaker's reads.
            call = runnable[0]
            outcomes[call.id] = invoke(call.name, decisions[call.id].arguments, self.context, self.tools)
        elif runnable:
            # Several calls in one reply run concurrently; their steps are written in call order.
            with ThreadPoolExecutor(max_workers=min(8, len(runnable))) as pool:
                results = pool.map(
                    lambda c: invoke(c.name, decisions[c.id].arguments, self.context, self.tools), runnable
                )
                outcomes.update({call.id: outcome for call, outcome in zip(runnable, results, strict=True)})
        for call in pooled:
            if decisions[call.id].refusal:
                outcomes[call.id] = refused(call.arguments, decisions[call.id].refusal, GUARDRAIL_REFUSED)
        # In call order; the outcomes that came together are written together (one transaction),
        # an engine call's step after the steps before it.
        steps: list[Step] = []
        together: list[tuple[ToolCall, Outcome, str, dict[str, int]]] = []
        for call in reply.tool_calls:
            if call in waiting:
                continue
            if call in engine:
                steps += self.record.tool_calls(turn, together, lead=lead)
                together, lead = [], None
                steps.append(self._engine_call(turn, call))
            else:
                together.append((call, outcomes[call.id], " ".join(decisions[call.id].notes), {}))
        steps += self.record.tool_calls(turn, together, lead=lead)
        if waiting:
            ask_for_confirmation(run=self.run, lease=self.lease, turn=turn, calls=waiting, tools=self.tools)
        return [s for s in steps if s.success is False]

    def _succeeded(self) -> set[str]:
        return {s.tool_name for s in self.record.steps or () if s.kind == Step.Kind.TOOL_CALL and s.success}

    def _guard(self, calls: list[ToolCall]) -> dict[str, Decision]:
        """The guardrails' verdict on each call, before any of them runs."""
        if not self.guardrails:
            return {c.id: Decision(arguments=c.arguments) for c in calls}
        succeeded = self._succeeded()
        return {c.id: self.guardrails.check(c.name, c.arguments, succeeded) for c in calls}

    def _answer_refused(self, answer: str) -> str:
        """A guardrail's refusal of ``answer`` now; "" when none applies or it has refused
        ANSWER_REFUSALS answers of this run already (then the answer stands)."""
        if not self.guardrails:
            return ""
        steps = self.record.steps or ()
        refused = [s for s in steps if s.kind == Step.Kind.MODEL_ERROR and s.error_class == GUARDRAIL_REFUSED]
        if len(refused) >= ANSWER_REFUSALS:
            return ""
        results = last_results(steps)
        return self.guardrails.answer_refusal(self._succeeded(), set(self.tools), answer=answer, results=results)

    # --- plan and sub-agents ----------------------------------------------------------------
    def _is_engine(self, call: ToolCall) -> bool:
        tool = self.tools.get(call.name)
        return tool is not None and tool.engine

    def _engine_call(self, turn: int, call: ToolCall) -> Step:
        outcome = invoke(call.name, call.arguments, self.context, self.tools)
        # A new plan is written with the step of the call that made it.
        plan = {"plan": outcome.result["steps"]} if outcome.ok and call.name == "update_plan" else None
        child = None
        if outcome.ok and call.name == SUBAGENT_TOOL:
            child, outcome = self._delegate(call, outcome)
        step = self.record.tool_call(turn, call, outcome, run_fields=plan)
        if child is not None:
            retrying(lambda: Run.objects.filter(pk=child.pk).update(parent_step=step), what="linking a sub-agent run")
        return step

    @cached_property
    def _depth(self) -> int:
        """How many runs this one is nested in (0 for a run a person started)."""
        depth, ancestor = 0, self.run
        while ancestor.parent_id is not None:
            depth, ancestor = depth + 1, ancestor.parent
        return depth

    def _delegate(self, call: ToolCall, outcome: Outcome) -> tuple[Run | None, Outcome]:
        if self._depth >= settings.SUBAGENT_MAX_DEPTH:
            outcome.ok, outcome.result = False, None
            outcome.error = f"Sub-agents may not delegate further (depth limit {settings.SUBAGENT_MAX_DEPTH})."
            outcome.error_class = "ToolError"
            return None, outcome
        child = retrying(lambda: self._child_run(outcome.result), what="creating a sub-agent run")
        execute_run(child.pk)
        child.refresh_from_db()
        outcome.finished_at = timezone.now()
        outcome.result = {"run_id": child.pk, "status": child.status, "answer": child.final_output}
        outcome.ok = child.status == Run.Status.SUCCEEDED
        if not outcome.ok:
            outcome.error = f"The sub-agent (run #{child.pk}) ended {child.status}: {child.error}"
            outcome.error_class = "SubAgentFailed"
        current_run.set(self.run.pk)
        return child, outcome

    @transaction.atomic
    def _child_run(self, sub_task: dict) -> Run:
        task = Task.objects.create(
            text=mask_text(sub_task["task"]),
            kind=sub_task["kind"],
            workspace=self.run.task.workspace,
            created_by=self.run.task.created_by,
        )
        return Run.objects.create(task=task, task_kind=task.kind, parent=self.run)

    def _plan_failed(self) -> dict:
        """The run's plan with its item in progress failed (written with the reflection that
        says why), or nothing when no item is in progress."""
        plan = [dict(item) for item in self.run.plan or []]
        for item in plan:
            if item.get("status") == "in_progress":
                item["status"] = "failed"
                return {"plan": plan}
        return {}


def _plan_at_end(plan: list[dict], status: str) -> list[dict]:
    """The plan as the run ended. A final answer concludes it: what was still in progress or
    pending is done (models rarely tick off every item before answering, and an answered run
    showing "pending" reads as still waiting). A run that failed or was stopped leaves pending
    items as they were (not reached) and fails the one in progress."""
    if status == Run.Status.SUCCEEDED:
        ended = {"in_progress": "completed", "pending": "completed"}
    else:
        ended = {"in_progress": "failed"}
    return [{**item, "status": ended.get(item.get("status"), item.get("status"))} for item in plan]


def execute_run(run_id: int, *, model: ChatModel | None = None, tools: dict[str, Tool] | None = None) -> None:
    """Claim a queued run and drive it until it ends or waits. Returns quietly if another
    worker has it: only a conditional update from "queued" claims a run."""
    lease = new_lease()
    if not claim_run(run_id, lease):
        # Not claimed because a person asked to cancel it while it was queued: it ends here. (A run
        # another worker claimed, or that has ended, is no longer queued: this changes nothing.)
        lifecycle.run_end(
            run_id=run_id,
            status=Run.Status.CANCELLED,
            error=lifecycle.CANCELLED_BY_A_USER,
            when=Q(status=Run.Status.QUEUED, cancel_requested=True),
        )
        return
    parent_run = current_run.get()
    current_run.set(run_id)
    run = load_run(run_id)
    heartbeat = Heartbeat(run_id, lease)
    heartbeat.start()
    try:
        AgentLoop(run, lease=lease, model=model, tools=tools).execute()
    except Paused:
        pass
    except LeaseLost:
        logger.warning("lost the lease of run %s to another worker; stopping", run_id)
        release_run(run_id)  # its sessions are the new worker's to open
    except Exception as exc:
        logger.exception("run crashed")
        _fail_crashed_run(run_id, lease, exc)
    finally:
        heartbeat.stop()
        current_run.set(parent_run)
        current_step.set(None)


def _fail_crashed_run(run_id: int, lease: str, exc: Exception) -> None:
    """End a crashed run as failed, with the reason. The crash may have been the database
    connection itself, so a dropped one is replaced first; if the database stays away, the
    heartbeat stops and the reaper re-queues the run later: it is never left half-done."""
    error = mask_text(f"Internal error: {type(exc).__name__}: {exc}")
    try:
        lifecycle.run_end(run_id=run_id, status=Run.Status.FAILED, error=error, lease=lease)
    except (OperationalError, InterfaceError):
        logger.error("could not mark run %s failed; the reaper will re-queue it", run_id)
