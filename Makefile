# `make run` serves the dashboard on the embedded default; `make test` runs the whole suite.
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8000
# Tests run on the real services: PostgreSQL and a Redis broker on this machine.
TEST_DATABASE_URL ?= postgres://root@127.0.0.1:5432/test
TEST_BROKER_URL ?= redis://127.0.0.1:6379/15
# Benchmarks get a PostgreSQL database of their own (dropped and re-created by `make bench`).
BENCH_DATABASE_URL ?= postgres://root@127.0.0.1:5432/bench
BENCH_RUNS ?= 100000
BENCH_BROKER_URL ?= redis://127.0.0.1:6379/13
BENCH_CACHE_URL ?= redis://127.0.0.1:6379/12

LLM_VENV := .venv-llm
LLM_PORT ?= 8080
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_BF16=OFF

.PHONY: run test lint clean local-llm local-llm-install demo-loop demo-loop-local loop loop-local bench ensure-wrk

$(BIN)/python:
	@py=$$(scripts/find-python) || exit 1; \
	echo "Creating $(VENV) with $$py"; \
	"$$py" -m venv $(VENV) && $(BIN)/pip install -q --upgrade pip

$(VENV)/.run-deps: requirements.txt | $(BIN)/python
	$(BIN)/pip install -q -r requirements.txt
	@touch $@

$(VENV)/.test-deps: requirements.txt requirements-test.txt requirements-bench.txt | $(BIN)/python
	$(BIN)/pip install -q -r requirements-test.txt -r requirements-bench.txt
	@touch $@ $(VENV)/.run-deps $(VENV)/.bench-deps

$(VENV)/.bench-deps: requirements.txt requirements-bench.txt | $(BIN)/python
	$(BIN)/pip install -q -r requirements-bench.txt
	@touch $@ $(VENV)/.run-deps

# wrk drives the dashboard benchmark (a Python load generator stands in where it is missing).
ensure-wrk:
	@command -v wrk >/dev/null || { [ "$$(id -u)" = 0 ] && (apt-get install -y -qq wrk >/dev/null 2>&1 || \
	  (apt-get update -qq && apt-get install -y -qq wrk >/dev/null)) ; } || echo "wrk not installed: using the Python load generator"

# Numbers come from here, never from timed tests. `make bench BENCH_RUNS=1000000` for the big scale.
bench: $(VENV)/.bench-deps ensure-wrk
	@scripts/ensure-services
	DATABASE_URL=$(BENCH_DATABASE_URL) CELERY_BROKER_URL=$(BENCH_BROKER_URL) CACHE_URL=$(BENCH_CACHE_URL) \
	  $(BIN)/python -m bench --runs $(BENCH_RUNS) $(BENCH_ARGS)

run: $(VENV)/.run-deps
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py collectstatic --noinput -v 0
	$(BIN)/python manage.py seed_demo
	@echo
	@echo "  Dashboard: http://127.0.0.1:$(PORT)/   (Ctrl-C stops the web server, worker and beat)"
	@echo
	WEB_PORT=$(PORT) $(BIN)/honcho start

$(LLM_VENV)/.installed: requirements-llm.txt
	@py=$$(scripts/find-python) || exit 1; "$$py" -m venv $(LLM_VENV)
	@echo "Installing llama-cpp-python (the first build compiles llama.cpp: several minutes)..."
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(LLM_VENV)/bin/pip install -q -r requirements-llm.txt
	@touch $@

local-llm-install: $(LLM_VENV)/.installed

# The local model, served by llama.cpp as an OpenAI-compatible endpoint on 127.0.0.1, no network
# needed: Qwen2.5-Coder-1.5B-Instruct (Q4_K_M), the smallest model here that calls tools correctly
# (SmolLM2-135M could not act as an agent). The model's own chat template (no --chat_format):
# it writes tool calls as <tool_call> tags the agent reads; llama-cpp-python's
# chatml-function-calling format let the model call tools but never answer, and HTML-escaped the
# conversation. A context that holds the prompt, its tools and a few turns; one thread per core.
LOCAL_LLM_MODEL := qwen2.5-coder-1.5b
LOCAL_LLM_THREADS ?= $(shell nproc)
LOCAL_LLM_SERVER = $(LLM_VENV)/bin/python -m llama_cpp.server --model "$$($(LLM_VENV)/bin/python scripts/local-model-path)" \
	  --model_alias $(LOCAL_LLM_MODEL) --n_ctx 8192 --n_threads $(LOCAL_LLM_THREADS) --host 127.0.0.1 --port $(LLM_PORT)
# What the product needs on that model: a long timeout (a reply takes 10-60 s on 2 cores), bounded
# replies, a small tool set (no sub-agents: a 1.5B model delegated every task to itself), tool
# retrieval without embeddings (the server has none), and the offline heuristic judge (a 1.5B
# judge adds a minute a run and little signal; the reference evaluator decides the outcome), and
# proposals written by mining's templates (the 1.5B model's own repeated the prompt's rules); 12
# steps: its model calls are steps too (8 before they were, for replies of tool calls alone).
LOCAL_LLM_ENV := OPENAI_BASE_URL=http://127.0.0.1:$(LLM_PORT)/v1 LLM_MODEL=$(LOCAL_LLM_MODEL) \
	LLM_TIMEOUT_SECONDS=300 LLM_MAX_TOKENS=384 LLM_MAX_ATTEMPTS=2 TOOL_RETRIEVAL_THRESHOLD=4 TOOL_RETRIEVAL_LIMIT=3 \
	LLM_EMBEDDING_MODEL= LLM_JUDGE_BACKEND=offline STRATEGY_PROPOSAL_WRITER=template AGENT_MAX_STEPS=12 AGENT_MAX_SECONDS=300 SUBAGENT_MAX_DEPTH=0

local-llm: $(LLM_VENV)/.installed
	@echo
	@echo "  Then run the product on it:  $(LOCAL_LLM_ENV) make run"
	@echo
	$(LOCAL_LLM_SERVER)

# The feedback loop on the local model, in the background: starts the server, runs the demo loop
# (DEMO_TASKS per phase, the trial up to DEMO_TRIAL_LIMIT runs; about a minute a run on 2 cores),
# and writes its progress to var/demo-loop-local.log. A pattern needs 3 failing runs of a task kind
# (STRATEGY_MIN_SUPPORT, 5 by default): a 10-task phase has 3 to 7 of each kind.
# The trial takes the DEMO_TRIAL_STRATEGIES best-supported proposals (a run is in one trial only:
# more strategies, fewer runs in each arm) and runs only tasks they apply to.
DEMO_TASKS ?= 10
DEMO_TRIAL_LIMIT ?= 30
DEMO_TRIAL_STRATEGIES ?= 1
demo-loop-local: $(VENV)/.run-deps $(LLM_VENV)/.installed
	$(BIN)/python manage.py migrate --noinput -v 0
	$(BIN)/python manage.py seed_demo --no-history > /dev/null
	@mkdir -p var
	@nohup bash -c '$(LOCAL_LLM_SERVER) > var/local-llm.log 2>&1 & server=$$!; trap "kill $$server" EXIT; \
	  until curl -sf http://127.0.0.1:$(LLM_PORT)/v1/models > /dev/null; do sleep 1; done; \
	  $(LOCAL_LLM_ENV) STRATEGY_MIN_SUPPORT=3 LOG_LEVEL=ERROR $(BIN)/python manage.py demo_loop --auto-approve \
	    --tasks $(DEMO_TASKS) --trial-batch $(DEMO_TASKS) --trial-limit $(DEMO_TRIAL_LIMIT) \
	    --trial-strategies $(DEMO_TRIAL_STRATEGIES)' > var/demo-loop-local.log 2>&1 &
	@echo "The demo loop runs in the background on the local model: tail -f var/demo-loop-local.log"

# The learning cycle (issue 25) on the workload datasets, through the product's services: the mining
# split as production runs, mining, a reviewer's pick (LOOP_REVIEWER, recorded as the actor of every
# decision), a paired experiment on the held-out split, promotion only where it says promote, the
# held-out split again; the report in var/learning-cycle.json and var/learning-cycle.md
# (docs/local-model.md). LOOP_MINING_ITEMS / LOOP_HELD_OUT_ITEMS cut each split (empty: every item);
# LOOP_ARGS adds options (--families arithmetic,email_triage, --picks 2, --no-insight-lists,
# --kinds guidance,guardrails).
# A pattern needs 3 failing runs of a task kind (STRATEGY_MIN_SUPPORT, 5 by default).
LOOP_REVIEWER ?= learning-cycle
LOOP_MINING_ITEMS ?=
LOOP_HELD_OUT_ITEMS ?=
LOOP_OPTIONS = --auto-approve-as $(LOOP_REVIEWER) $(if $(LOOP_MINING_ITEMS),--mining-items $(LOOP_MINING_ITEMS)) \
	$(if $(LOOP_HELD_OUT_ITEMS),--held-out-items $(LOOP_HELD_OUT_ITEMS)) $(LOOP_ARGS)

# On the offline demo model, quick (8 items of each split unless told otherwise).
loop: LOOP_MINING_ITEMS := $(or $(LOOP_MINING_ITEMS),8)
loop: LOOP_HELD_OUT_ITEMS := $(or $(LOOP_HELD_OUT_ITEMS),8)
loop: $(VENV)/.run-deps
	$(BIN)/python manage.py migrate --noinput -v 0
	$(BIN)/python manage.py seed_demo --no-history > /dev/null
	LLM_BACKEND=offline STRATEGY_MIN_SUPPORT=3 LOG_LEVEL=ERROR $(BIN)/python manage.py learning_cycle $(LOOP_OPTIONS)

# On the local model, in the background: starts the server as demo-loop-local does, runs the cycle
# with LOCAL_LLM_ENV (every item of both splits unless told otherwise), one line per run and per
# stage in var/loop-local.log.
loop-local: $(VENV)/.run-deps $(LLM_VENV)/.installed
	$(BIN)/python manage.py migrate --noinput -v 0
	$(BIN)/python manage.py seed_demo --no-history > /dev/null
	@mkdir -p var
	@nohup bash -c '$(LOCAL_LLM_SERVER) > var/local-llm.log 2>&1 & server=$$!; trap "kill $$server" EXIT; \
	  until curl -sf http://127.0.0.1:$(LLM_PORT)/v1/models > /dev/null; do sleep 1; done; \
	  $(LOCAL_LLM_ENV) STRATEGY_MIN_SUPPORT=3 LOG_LEVEL=ERROR $(BIN)/python manage.py learning_cycle $(LOOP_OPTIONS)' \
	  > var/loop-local.log 2>&1 &
	@echo "The learning cycle runs in the background on the local model: tail -f var/loop-local.log"

# Twice: the whole suite on PostgreSQL, a real Redis broker and worker processes, Chromium; then
# everything that does not need PostgreSQL itself on the embedded default (SQLite, the file-system
# broker and cache, in a folder of its own), as `make run` serves it.
test: $(VENV)/.test-deps $(LLM_VENV)/.installed ensure-wrk
	@scripts/ensure-services
	@scripts/ensure-chromium
	$(BIN)/ruff check .
	DATABASE_URL=$(TEST_DATABASE_URL) CELERY_BROKER_URL=$(TEST_BROKER_URL) CACHE_URL=redis://127.0.0.1:6379/14 CELERY_TASK_DEFAULT_QUEUE=test-$$$$ \
	  STATIC_MANIFEST=false TEST_REQUIRE_SERVICES=1 $(BIN)/python -m pytest -q $(PYTEST_ARGS)
	@echo "--- the embedded default (SQLite, file-system broker) ---"
	embedded=$$(mktemp -d) && trap 'rm -rf "$$embedded"' EXIT && \
	  env -u DATABASE_URL -u CELERY_BROKER_URL -u CACHE_URL VAR_DIR=$$embedded STATIC_MANIFEST=false TEST_EMBEDDED=1 \
	  $(BIN)/python -m pytest -q -p no:cacheprovider -m "not postgresql and not integration and not browser" $(PYTEST_ARGS)

lint: $(VENV)/.test-deps
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) $(LLM_VENV) var

# The feedback loop end to end on the offline model: before, trial, after (see the README).
demo-loop: $(VENV)/.run-deps
	$(BIN)/python manage.py migrate --noinput -v 0
	$(BIN)/python manage.py seed_demo --no-history > /dev/null
	LOG_LEVEL=ERROR $(BIN)/python manage.py demo_loop --auto-approve --quiet --tasks $(or $(TASKS),150)
