# Tiffin: the commands a newcomer needs. `make demo` and `make test` work on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
STAMP := $(VENV)/.installed
# The test suite's PostgreSQL; pytest-django creates and drops test_<name> itself.
PG_URL ?= $(if $(DATABASE_URL),$(DATABASE_URL),postgres://postgres@127.0.0.1:5432/tiffin)
SQLITE_TEST_URL := sqlite:///db/tiffin-test.sqlite3

.PHONY: help venv demo test lint typecheck test-postgres test-sqlite scenarios bench up clean

help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

$(STAMP): requirements.txt requirements-dev.txt
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) not found; set PYTHON=/path/to/python3.11"; exit 1; }
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $(STAMP)

venv: $(STAMP) ## Create .venv and install the pinned requirements

demo: $(STAMP) ## Run the main job end to end on the SQLite default and show what happened
	$(PY) manage.py migrate --noinput --verbosity 0
	$(PY) manage.py seed_demo --reset
	$(PY) manage.py demo_summary

lint: $(STAMP) ## ruff lint and format check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP) ## mypy with django-stubs
	$(BIN)/mypy .

test-postgres: $(STAMP)
	PGHOST=127.0.0.1 scripts/ensure_postgres.sh
	DATABASE_URL=$(PG_URL) $(BIN)/pytest -p no:cacheprovider

test-sqlite: $(STAMP)
	DATABASE_URL=$(SQLITE_TEST_URL) $(BIN)/pytest -p no:cacheprovider -m "not postgres"

test: lint typecheck test-postgres test-sqlite ## Lint, type-check, the whole suite on PostgreSQL, the portable part on SQLite

bench: $(STAMP) ## Five benchmarks against their references on PostgreSQL (bench/results/, BENCHMARKS.md)
	PGHOST=127.0.0.1 scripts/ensure_postgres.sh
	$(PY) -m bench

clean: ## Remove the virtual environment and the SQLite files
	rm -rf $(VENV) db staticfiles
