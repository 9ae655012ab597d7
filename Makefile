# `make run` serves the dashboard on the embedded default; `make test` runs the whole suite.
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8000
# Tests run on the real services: PostgreSQL and a Redis broker on this machine.
TEST_DATABASE_URL ?= postgres://root@127.0.0.1:5432/test
TEST_BROKER_URL ?= redis://127.0.0.1:6379/15

.PHONY: run test lint check clean

$(BIN)/python:
	@py=$$(scripts/find-python) || exit 1; \
	echo "Creating $(VENV) with $$py"; \
	"$$py" -m venv $(VENV) && $(BIN)/pip install -q --upgrade pip

$(VENV)/.run-deps: requirements.txt | $(BIN)/python
	$(BIN)/pip install -q -r requirements.txt
	@touch $@

$(VENV)/.test-deps: requirements.txt requirements-test.txt | $(BIN)/python
	$(BIN)/pip install -q -r requirements-test.txt
	@touch $@ $(VENV)/.run-deps

run: $(VENV)/.run-deps
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py collectstatic --noinput -v 0
	$(BIN)/python manage.py seed_demo
	@echo
	@echo "  Dashboard: http://127.0.0.1:$(PORT)/   (Ctrl-C stops the web server, worker and beat)"
	@echo
	WEB_PORT=$(PORT) $(BIN)/honcho start

test: $(VENV)/.test-deps
	@scripts/ensure-services
	@scripts/ensure-chromium
	$(BIN)/ruff check .
	DATABASE_URL=$(TEST_DATABASE_URL) CELERY_BROKER_URL=$(TEST_BROKER_URL) CACHE_URL=redis://127.0.0.1:6379/14 CELERY_TASK_DEFAULT_QUEUE=test-$$$$ \
	  STATIC_MANIFEST=false TEST_REQUIRE_SERVICES=1 $(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(VENV)/.test-deps
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) var
