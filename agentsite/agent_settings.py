"""The agent's settings, read by settings.py with its typed reader (agentsite/environment.py): the
model endpoint, the loop's limits, its tools, the runs' heartbeat, paired experiments, and the
folders runs work in.

A function of the reader rather than a module of its own settings: settings.py is run again with
another environment (tests/test_settings_typed.py), and these must be read again with it, into the
same list of problems.
"""

from pathlib import Path
from typing import Any

from agentsite.environment import Environment


def agent_settings(env: Environment, *, var_dir: Path) -> dict[str, Any]:
    """The settings below, by name (every upper-case local); ``var_dir``: the embedded default's folder."""
    # --- The model endpoint and the loop ---
    OPENAI_API_KEY = env.str("OPENAI_API_KEY", default="")
    OPENAI_BASE_URL = env.url("OPENAI_BASE_URL", default="", schemes=("http", "https"))
    # "auto" uses the OpenAI-compatible endpoint when one is configured, the offline demo model
    # otherwise; "offline" and "openai" force one.
    LLM_BACKEND = env.str("LLM_BACKEND", default="auto", choices=("auto", "offline", "openai"))
    LLM_MODEL = env.str("LLM_MODEL", default="gpt-4o-mini")
    LLM_JUDGE_MODEL = env.str("LLM_JUDGE_MODEL", default="") or LLM_MODEL
    # A judgement is a score and a sentence or two: a bound keeps a rambling judge from costing minutes.
    # "auto": the LLM judge on the agent's endpoint when there is one; "offline": the heuristic judge.
    LLM_JUDGE_BACKEND = env.str("LLM_JUDGE_BACKEND", default="auto", choices=("auto", "offline"))
    LLM_JUDGE_MAX_TOKENS = env.int("LLM_JUDGE_MAX_TOKENS", default=300, ge=1)
    LLM_TIMEOUT_SECONDS = env.float("LLM_TIMEOUT_SECONDS", default=60.0, gt=0)
    # "auto": native tool calling, falling back to JSON replies if the endpoint refuses tools.
    LLM_TOOL_MODE = env.str("LLM_TOOL_MODE", default="auto", choices=("auto", "native", "json"))
    # A bound on every reply (0: the endpoint's own): a small local model can ramble for minutes.
    LLM_MAX_TOKENS = env.int("LLM_MAX_TOKENS", default=1024, ge=0)
    # Unset: the endpoint's own default. 0 makes a local model's runs repeatable.
    LLM_TEMPERATURE = env.float("LLM_TEMPERATURE", default=None, ge=0, le=2)
    # Tools offered without length and pattern bounds ("auto": to every endpoint but OpenAI's), so a
    # server that decodes by grammar (llama.cpp) can build one; the invoker validates them all anyway.
    LLM_GRAMMAR_SAFE_SCHEMAS = env.str("LLM_GRAMMAR_SAFE_SCHEMAS", default="auto", choices=("auto", "on", "off"))
    LLM_EMBEDDING_MODEL = env.str("LLM_EMBEDDING_MODEL", default="text-embedding-3-small")
    LLM_MAX_ATTEMPTS = env.int("LLM_MAX_ATTEMPTS", default=4, ge=1)
    LLM_BACKOFF_SECONDS = env.float("LLM_BACKOFF_SECONDS", default=1.0, ge=0)
    AGENT_MAX_STEPS = env.int("AGENT_MAX_STEPS", default=30, ge=1)
    AGENT_MAX_SECONDS = env.int("AGENT_MAX_SECONDS", default=600, ge=1)
    # The same call failing the same way this many times ends the run instead of spinning.
    AGENT_MAX_IDENTICAL_FAILURES = env.int("AGENT_MAX_IDENTICAL_FAILURES", default=3, ge=1)
    SUBAGENT_MAX_DEPTH = env.int("SUBAGENT_MAX_DEPTH", default=2, ge=0)
    # More enabled tools than this and only the most relevant TOOL_RETRIEVAL_LIMIT are offered.
    TOOL_RETRIEVAL_THRESHOLD = env.int("TOOL_RETRIEVAL_THRESHOLD", default=15, ge=0)
    TOOL_RETRIEVAL_LIMIT = env.int("TOOL_RETRIEVAL_LIMIT", default=10, ge=1)
    TOOL_BREAKER_FAILURES = env.int("TOOL_BREAKER_FAILURES", default=5, ge=1)
    TOOL_BREAKER_RESET_SECONDS = env.float("TOOL_BREAKER_RESET_SECONDS", default=30.0, gt=0)
    TOOL_BACKOFF_SECONDS = env.float("TOOL_BACKOFF_SECONDS", default=0.2, ge=0)
    # Beat lists an MCP server's tools again when its stored listing is older than this (0: only a
    # server never listed, or when an operator saves or tests it in the admin). Runs never list.
    MCP_TOOLS_REFRESH_SECONDS = env.int("MCP_TOOLS_REFRESH_SECONDS", default=3600, ge=0)
    HTTP_GET_ALLOWED_HOSTS = env.list("HTTP_GET_ALLOWED_HOSTS", default=[])
    # A running run whose heartbeat is older than this lost its worker; the reaper re-queues it.
    RUN_HEARTBEAT_SECONDS = env.float("RUN_HEARTBEAT_SECONDS", default=5.0, gt=0)
    RUN_STALE_AFTER_SECONDS = env.float("RUN_STALE_AFTER_SECONDS", default=60.0, gt=0)
    env.require(
        RUN_STALE_AFTER_SECONDS > RUN_HEARTBEAT_SECONDS,
        "RUN_STALE_AFTER_SECONDS must be more than RUN_HEARTBEAT_SECONDS: the reaper would re-queue running runs.",
    )

    # Paired experiments (feedback/experiments/): pairs run at once per experiment, and how long a
    # queued experiment run waits before looking again when production runs are waiting for a worker.
    EXPERIMENT_PAIRS_IN_FLIGHT = env.int("EXPERIMENT_PAIRS_IN_FLIGHT", default=2, ge=1)
    EXPERIMENT_YIELD_SECONDS = env.float("EXPERIMENT_YIELD_SECONDS", default=2.0, gt=0)

    # --- Where runs work ---
    WORKSPACES_ROOT = Path(env.str("WORKSPACES_ROOT", default=str(var_dir / "workspaces")))
    RUN_SANDBOXES_ROOT = Path(env.str("RUN_SANDBOXES_ROOT", default=str(var_dir / "runs")))
    # Each person's disk quota in MB (of 1024 x 1024 bytes; feedback/quota.py): their upload workspaces
    # plus their runs' sandboxes still kept. A submission or re-run that would pass it is refused. 0: none.
    DISK_QUOTA_MB = env.int("DISK_QUOTA_MB", default=100, ge=0)
    # Days a run's sandbox is kept once the run has ended (feedback/retention.py, beat's hourly clean-up).
    # 0: kept forever.
    RUN_SANDBOX_RETENTION_DAYS = env.int("RUN_SANDBOX_RETENTION_DAYS", default=14, ge=0)

    return {name: value for name, value in locals().items() if name.isupper()}
