"""The peer of benchmark 1: LangGraph's prebuilt ReAct agent with its PostgreSQL checkpointer,
on the same zero-latency workload (a tool call per turn, an instant tool, then an answer).

Imported only by the benchmarks, and only when requirements-bench.txt is installed.
"""

import time
from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.prebuilt import create_react_agent


@tool
def noop() -> dict:
    """Do nothing, instantly."""
    return {"ok": True}


class ZeroLatencyChatModel(BaseChatModel):
    """Calls ``noop`` until ``calls`` tool results are in the conversation, then answers."""

    calls: int

    @property
    def _llm_type(self) -> str:
        return "zero-latency"

    def bind_tools(self, tools: Any, **kwargs: Any) -> "ZeroLatencyChatModel":
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any):
        done = sum(1 for m in messages if isinstance(m, ToolMessage))
        if done >= self.calls:
            message = AIMessage(content="Done.")
        else:
            message = AIMessage(content="", tool_calls=[{"name": "noop", "args": {}, "id": f"call-{done}"}])
        return ChatResult(generations=[ChatGeneration(message=message)])


def _libpq_url(database_url: str) -> str:
    return database_url.replace("postgres://", "postgresql://", 1)


def run_react_agent(steps: int, database_url: str, *, thread_id: str, durability: str | None = None) -> float:
    """Seconds for one ``steps``-step run checkpointed to PostgreSQL: every super-step by default
    (``durability`` "async"), or only when the run exits (``durability="exit"``)."""
    with PostgresSaver.from_conn_string(_libpq_url(database_url)) as saver:
        saver.setup()
        agent = create_react_agent(ZeroLatencyChatModel(calls=steps - 1), [noop], checkpointer=saver)
        started = time.perf_counter()
        state = agent.invoke(
            {"messages": [("user", "Call noop until told to stop.")]},
            {"configurable": {"thread_id": thread_id}, "recursion_limit": 4 * steps + 10},
            durability=durability,
        )
        elapsed = time.perf_counter() - started
    tool_results = sum(1 for m in state["messages"] if isinstance(m, ToolMessage))
    if tool_results != steps - 1:
        raise RuntimeError(f"the LangGraph run made {tool_results} tool calls, not {steps - 1}")
    return elapsed
