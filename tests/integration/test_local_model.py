"""The agent on a real local model: Qwen2.5-Coder-1.5B-Instruct through llama.cpp's
OpenAI-compatible server, as `make local-llm` serves it (the same flags, the product's settings
for it). Slow on purpose and run in CI: `make test` installs the model first.

The model call is real, so the test keeps to one short task whose tool call a 1.5B model makes
reliably at temperature 0: the arithmetic goes through the calculator, not the model's head.
"""

import re
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings

from feedback.agent.loop import execute_run
from feedback.models import Run, Step, Task

from ..factories import make_run
from ..net import free_port

pytestmark = [pytest.mark.integration, pytest.mark.django_db]
ROOT = Path(settings.BASE_DIR)
LLM_PYTHON = ROOT / ".venv-llm" / "bin" / "python"


def _server_command(port: int) -> list[str]:
    """The command `make local-llm` runs, read from the Makefile so the two cannot drift apart."""
    out = subprocess.run(
        ["make", "-s", "-n", "local-llm", f"LLM_PORT={port}"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    line = next(line for line in out.splitlines() if "llama_cpp.server" in line)
    model = subprocess.run(
        [LLM_PYTHON, "scripts/local-model-path"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    line = re.sub(r'"\$\(.*?local-model-path\)"', model, line)
    return line.split()


@pytest.fixture(scope="module")
def local_model():
    if not LLM_PYTHON.exists():
        pytest.fail("The local model is not installed: run `make local-llm-install` (make test does it).")
    port = free_port()
    server = subprocess.Popen(_server_command(port), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                urllib.request.urlopen(f"{base_url}/models", timeout=2).read()
                break
            except OSError:
                assert server.poll() is None, "the llama.cpp server exited"
                assert time.monotonic() < deadline, "the llama.cpp server did not start in 180 s"
                time.sleep(0.5)
        yield base_url
    finally:
        server.terminate()
        server.wait(timeout=30)


def _on_the_local_model(settings, base_url: str) -> None:
    """The product's settings for the local model, one short task's worth of steps."""
    settings.LLM_BACKEND = "openai"
    settings.OPENAI_BASE_URL = base_url
    settings.LLM_MODEL = "qwen2.5-coder-1.5b"
    settings.LLM_TIMEOUT_SECONDS = 300
    settings.LLM_MAX_TOKENS = 256
    settings.LLM_TEMPERATURE = 0.0
    settings.LLM_EMBEDDING_MODEL = ""
    settings.TOOL_RETRIEVAL_THRESHOLD, settings.TOOL_RETRIEVAL_LIMIT = 4, 1
    settings.AGENT_MAX_STEPS = 4


def test_the_server_command_is_the_one_make_local_llm_runs():
    command = " ".join(_server_command(8080))
    # The model's own chat template: chatml-function-calling could not answer (docs/agent.md).
    assert "--n_ctx 8192" in command and "--chat_format" not in command
    assert "--model_alias qwen2.5-coder-1.5b" in command and "--n_threads" in command
    assert command.split("--model ")[1].split()[0].endswith("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")


def test_a_real_tool_call_through_the_local_model(local_model, settings, demo_workspace):
    _on_the_local_model(settings, local_model)
    # The calculator's description held an example, (17 * 23 + 4) / 3, and the model wrote it for
    # any sum: a call whose value is the task's own sum shows the model read the task.
    run = make_run(text="Use the calculator: what is 41 * 12 + 7?", kind=Task.Kind.ARITHMETIC,
                   workspace=demo_workspace)  # fmt: skip
    execute_run(run.pk)
    run.refresh_from_db()
    assert run.model_name == "qwen2.5-coder-1.5b" and run.llm_backend == "openai"
    assert run.tokens_in > 0 and run.tokens_out > 0  # usage came back from the real server
    # The tools went to the model and it used one: a real call, validated and executed.
    assert "calculator" in run.tools_offered
    call = run.steps.filter(kind=Step.Kind.TOOL_CALL, tool_name="calculator").first()
    assert call is not None, list(run.steps.values_list("kind", "tool_name", "error"))
    assert call.success and call.result["value"] == 499, (call.arguments, call.result, call.error)
    assert run.status in (Run.Status.SUCCEEDED, Run.Status.FAILED)
    if run.status == Run.Status.SUCCEEDED:
        assert "499" in run.final_output
    else:
        assert run.error  # a step limit after the call is said, not swallowed


def test_a_real_model_call_through_a_strategy_injected_prompt(local_model, settings, demo_workspace):
    """The loop's point on a real model: a live strategy's guidance and worked example reach the
    prompt the real server answers, and the run records which strategy it got."""
    from feedback.models import AppliedStrategy, Strategy, StrategyVersion

    _on_the_local_model(settings, local_model)
    guidance = (
        "Never compute in your head: pass the whole expression to the calculator tool, then answer with its value."
    )
    example = 'Task: what is 6 * 7 + 1?\nCall calculator(expression="6 * 7 + 1") -> 43\nAnswer: 43'
    strategy = Strategy.objects.create(title="Use the calculator", pattern_kind="manual", status=Strategy.Status.ACTIVE)
    strategy.current_version = StrategyVersion.objects.create(
        strategy=strategy,
        number=1,
        title=strategy.title,
        pattern="unevaluated expression",
        new_guidance=guidance,
        worked_example=example,
        condition={"task_kinds": ["arithmetic"]},
    )
    strategy.save()

    run = make_run(text="What is 37 * 14 - 9?", kind=Task.Kind.ARITHMETIC, workspace=demo_workspace)
    execute_run(run.pk)
    run.refresh_from_db()
    assert guidance in run.system_prompt and "6 * 7 + 1" in run.system_prompt
    assert list(run.applied_strategies.values_list("strategy_version", "arm")) == [
        (strategy.current_version.pk, AppliedStrategy.Arm.ACTIVE)
    ]
    # The real server answered that prompt: a model call recorded as a step, with its usage. Whether
    # a 1.5B model follows the guidance is what experiments measure (docs/local-model.md), not this.
    assert run.tokens_in > 0 and run.tokens_out > 0
    model_steps = run.steps.filter(kind__in=(Step.Kind.THOUGHT, Step.Kind.FINAL))
    assert model_steps.exists() and model_steps.first().duration_ms > 0
    assert run.status in (Run.Status.SUCCEEDED, Run.Status.FAILED) and (run.final_output or run.error)
