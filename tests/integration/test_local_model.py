"""The agent on a real local model (SmolLM2-135M through llama.cpp's OpenAI-compatible server).

Slow on purpose and run in CI: `make test` installs the model first (`make local-llm-install`).
A 135M model makes real mistakes; the test checks the product handles whatever it does.
"""

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
LLM_PYTHON = Path(settings.BASE_DIR) / ".venv-llm" / "bin" / "python"


@pytest.fixture(scope="module")
def local_model():
    if not LLM_PYTHON.exists():
        pytest.fail("The local model is not installed: run `make local-llm-install` (make test does it).")
    port = free_port()
    model_path = subprocess.run(
        [LLM_PYTHON, "scripts/smollm2-path"], cwd=settings.BASE_DIR, capture_output=True, text=True, check=True
    ).stdout.strip()
    server = subprocess.Popen(
        [LLM_PYTHON, "-m", "llama_cpp.server", "--model", model_path, "--chat_format", "chatml-function-calling",
         "--model_alias", "smollm2", "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "4096"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{base_url}/models", timeout=2).read()
                break
            except OSError:
                assert server.poll() is None, "the llama.cpp server exited"
                assert time.monotonic() < deadline, "the llama.cpp server did not start in 120 s"
                time.sleep(0.5)
        yield base_url
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_agent_runs_on_a_real_local_model(local_model, settings, demo_workspace):
    settings.LLM_BACKEND = "openai"
    settings.OPENAI_BASE_URL = local_model
    settings.LLM_MODEL = "smollm2"
    settings.LLM_TIMEOUT_SECONDS = 120
    settings.AGENT_MAX_STEPS = 8
    run = make_run(text="Summarise report.txt and count its words", kind=Task.Kind.FILE_ANALYSIS,
                   workspace=demo_workspace)  # fmt: skip
    execute_run(run.pk)
    run.refresh_from_db()
    assert run.status in (Run.Status.SUCCEEDED, Run.Status.FAILED), run.status
    assert run.model_name == "smollm2" and run.llm_backend == "openai"
    assert run.step_count >= 1
    assert run.tokens_in > 0 and run.tokens_out > 0  # usage came back from the real server
    if run.status == Run.Status.FAILED:
        assert run.error  # whatever went wrong is said, not swallowed
    else:
        assert run.steps.filter(kind=Step.Kind.FINAL).exists() and run.final_output
