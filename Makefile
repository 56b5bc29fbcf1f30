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
# Drop and create the database of the postgres:// URL $(1), for a recipe that starts from an empty one.
database_fresh = psql "$(dir $(1))postgres" -qc 'DROP DATABASE IF EXISTS $(notdir $(1)) WITH (FORCE)' -c 'CREATE DATABASE $(notdir $(1))'

.PHONY: help venv demo demo-jobs screenshots test lint typecheck test-postgres test-sqlite scenarios scenario-deps compare compare-keys bench bench-large bench-history bench-peers bench-backlog compare-peers bench-replication soak chaos up browser-deps prometheus-deps failover-deps failover test-failover clean

help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

$(STAMP): requirements.txt requirements-dev.txt
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) not found; set PYTHON=/path/to/python3.11"; exit 1; }
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $(STAMP)

venv: $(STAMP) ## Create .venv and install the pinned requirements

# The demo's instants, worked out when used (after the virtualenv exists). The seed ends
# 20 minutes ago, so the orders it left unanswered are past their 10-minute deadline when
# the jobs run, as of now.

# The demo's simulated clock starts at 20:00 UTC on the Sunday before today, half an hour
# before the weekly payout tick; the seeded history ends there too. The crash hits the
# payout run at 20:30, which pays one restaurant per transaction (PAYOUT_BATCH_SIZE=1) so
# that it is still running when the worker is killed; then a second crash lands inside the
# transfer sending (--kill-sender: the worker of a send-transfers run SIGKILLed with its
# requests in flight at the provider sandbox simulate starts). The report prints the
# provider's transfers beside the ledger, per restaurant.
DEMO_START = $(shell $(PY) -c 'from datetime import UTC, datetime, timedelta; d = datetime.now(UTC); d -= timedelta(days=d.weekday() + 1); print(d.replace(hour=20, minute=0, second=0, microsecond=0).isoformat())')

# The demo runs locally on the development key, which the settings accept only with
# DEBUG on (with DEBUG off they refuse to start without a SECRET_KEY).
# The long-running commands (simulate, the soak, the chaos table) are started with exec: make
# signals only the recipe's shell, so a SIGTERM to make would otherwise never reach them and
# their servers would be left running.
demo demo-jobs compare compare-keys: export DEBUG ?= 1
# The demo's side-by-side of naive cron and the claim runs on a database of its own.
DEMO_COMPARE_URL := sqlite:///db/demo-compare.sqlite3

demo: $(STAMP) ## The main job end to end on the SQLite default: seed, then 3 servers for 2 simulated hours through a crash, and the report
	$(PY) manage.py migrate --noinput --verbosity 0
	$(PY) manage.py seed_demo --reset --delete-payouts --now $(DEMO_START)
	PAYOUT_BATCH_SIZE=1 exec $(PY) manage.py simulate --reset --start $(DEMO_START) --duration 2h --speed 120 --servers 3 \
	  --crash-worker 30m --fault-job weekly-payouts --kill-sender 30m --log-dir db/demo-logs
	@echo ""
	@echo "The nightly cart clean-up (02:00 UTC, outside the two simulated hours), run once here through its claim:"
	@DEBUG=1 LOG_LEVEL=WARNING $(PY) manage.py run_job clean-carts --sync
	@echo ""
	@echo "Why not the crontab on every server? The same probe on three servers, naive against the claim ('make compare' runs all five):"
	@DATABASE_URL=$(DEMO_COMPARE_URL) $(PY) manage.py migrate --noinput --verbosity 0
	@DATABASE_URL=$(DEMO_COMPARE_URL) exec $(PY) manage.py simulate --compare every-server,claim --strategy-faults none \
	  --duration 10m --speed 120 --servers 3 --reset
	@echo ""
	@echo "Look around: 'make up' serves the admin at http://127.0.0.1:8000/admin/ (it prints a login)"
	@echo "  job runs, their events and fences: /admin/scheduling/jobrun/   payouts: /admin/payouts/payout/"
	@echo "  'DEBUG=1 $(PY) manage.py demo_summary' prints the payouts per restaurant and week; process logs are in db/demo-logs/"

demo-jobs: $(STAMP) ## Run the jobs once, here, through their claims: catch up payouts, clean carts, cancel stale orders
	LOG_LEVEL=WARNING $(PY) manage.py catch_up_payouts
	LOG_LEVEL=WARNING $(PY) manage.py run_job clean-carts --sync
	LOG_LEVEL=WARNING $(PY) manage.py run_job cancel-stale-orders --sync

lint: $(STAMP) ## ruff lint and format check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP) ## mypy with django-stubs
	$(BIN)/mypy .

test-postgres: $(STAMP) scenario-deps failover-deps
	PGHOST=127.0.0.1 scripts/ensure_postgres.sh
	DATABASE_URL=$(PG_URL) $(BIN)/pytest -p no:cacheprovider

test-sqlite: $(STAMP)
	DATABASE_URL=$(SQLITE_TEST_URL) $(BIN)/pytest -p no:cacheprovider -m "not postgres and not browser and not scenario"

screenshots: $(STAMP) browser-deps ## Rewrite docs/dashboard.png and docs/explainer.png from the browser tests
	PGHOST=127.0.0.1 scripts/ensure_postgres.sh
	TIFFIN_SCREENSHOTS=1 DATABASE_URL=$(PG_URL) $(BIN)/pytest -p no:cacheprovider -m browser tests/browser

test: lint typecheck browser-deps prometheus-deps test-postgres test-sqlite test-failover ## Lint, type-check, the whole suite on PostgreSQL, the portable part on SQLite, the failover table

test-failover: export DEBUG ?= 1
test-failover: $(STAMP) failover-deps
	@$(PY) -m tests.scenarios.failover_table --modes $(FAILOVER_MODES); status=$$?; \
	if [ $$status = 2 ] && [ "$${CI:-}" != true ]; then echo "make failover skipped: its binaries are missing"; exit 0; fi; \
	exit $$status

# The failure scenarios (tests/scenarios, marker `scenario`) start real processes against
# fresh PostgreSQL databases; `make test` runs them in its PostgreSQL pass. The pooler
# scenario needs pgbouncer, the Redis-lock one a Redis (REDIS_URL, or a redis-server the
# test starts), and the restart scenario PostgreSQL's server binaries (initdb, postgres: it
# restarts a throwaway cluster of its own, never the server at PG_URL). Each is installed
# with apt when missing and we are root; without it that scenario skips with the reason,
# except under CI=true, where it fails.
scenarios: $(STAMP) scenario-deps ## The failure scenarios alone (real processes, injected faults; a few minutes)
	PGHOST=127.0.0.1 scripts/ensure_postgres.sh
	DATABASE_URL=$(PG_URL) $(BIN)/pytest -p no:cacheprovider -m scenario tests/scenarios

scenario-deps: ## Install pgbouncer, redis-server and PostgreSQL's server binaries for the scenarios if missing
	@missing=""; \
	for package in pgbouncer redis-server; do \
	  command -v $$package >/dev/null || [ -x /usr/sbin/$$package ] || [ -x /usr/bin/$$package ] || missing="$$missing $$package"; \
	done; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null || missing="$$missing postgresql"; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "Installing$$missing for the scenarios (apt-get)"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	      $$missing; } >/tmp/tiffin-scenario-deps.log 2>&1 \
	    || { tail -5 /tmp/tiffin-scenario-deps.log; \
	         echo "Could not install$$missing: the scenarios needing it will be skipped (and fail under CI=true)"; }; \
	else \
	  echo "Missing for the scenarios:$$missing: run 'sudo apt-get install$$missing';"; \
	  echo "without it the scenarios needing it are skipped (and fail under CI=true)"; \
	fi

# The alternatives side by side (README, "Why not a lock?"): a database of its own, dropped
# and created afresh; Redis at REDIS_URL (default redis://127.0.0.1:6379/0), else the
# Redis-lock row says why it was skipped.
COMPARE_URL ?= postgres://postgres@127.0.0.1:5432/tiffin_compare
COMPARE_START := 2027-03-07T20:00:00Z
compare: $(STAMP) scenario-deps ## Every server, one special server, a Redis lock, an advisory lock and the claim through the same faults: one table (a few minutes)
	PGHOST=127.0.0.1 scripts/ensure_postgres.sh
	$(call database_fresh,$(COMPARE_URL))
	DATABASE_URL=$(COMPARE_URL) $(PY) manage.py migrate --noinput --verbosity 0
	DATABASE_URL=$(COMPARE_URL) LOG_LEVEL=WARNING exec $(PY) manage.py simulate --compare --reset \
	  --start $(COMPARE_START) --duration 30m --speed 120 --servers 3 --log-dir db/compare-logs

COMPARE_KEYS_URL ?= postgres://postgres@127.0.0.1:5432/tiffin_compare_keys
compare-keys: $(STAMP) ## No key, a uuid4 per attempt, the fence as the key and Tiffin's outbox, through the same provider faults: one table (about a minute)
	PGHOST=127.0.0.1 scripts/ensure_postgres.sh
	$(call database_fresh,$(COMPARE_KEYS_URL))
	DATABASE_URL=$(COMPARE_KEYS_URL) $(PY) manage.py migrate --noinput --verbosity 0
	DATABASE_URL=$(COMPARE_KEYS_URL) LOG_LEVEL=ERROR exec $(PY) manage.py compare_keys --restaurants 3 --weeks 2

# The browser tests drive Debian's Chromium (never a downloaded browser). Installed with
# apt when missing and we are root; otherwise say what to install. Without it the browser
# tests skip with the reason, except under CI=true, where they fail.
CHROMIUM := /usr/bin/chromium
browser-deps: ## Install Debian's chromium for the browser tests if it is missing
	@if [ -x $(CHROMIUM) ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "Installing Debian's chromium for the browser tests (apt-get)"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	      chromium fonts-dejavu-core; } >/tmp/tiffin-browser-deps.log 2>&1 \
	    || { tail -5 /tmp/tiffin-browser-deps.log; \
	         echo "Could not install chromium: the browser tests will be skipped (and fail under CI=true)"; }; \
	else \
	  echo "$(CHROMIUM) is missing: run 'sudo apt-get install chromium' to run the browser tests;"; \
	  echo "without it they are skipped (and fail under CI=true)"; \
	fi

# The metrics tests run Debian's promtool and Prometheus server (package prometheus).
# Installed with apt when missing and we are root, with --no-install-recommends and
# policy-rc.d refusing to start its service (the tests start their own server on a free
# port). Without it those tests skip with the reason, except under CI=true, where they fail.
PROMTOOL := /usr/bin/promtool
prometheus-deps: ## Install Debian's prometheus (promtool and the server) for the metrics tests if it is missing
	@if [ -x $(PROMTOOL) ] && [ -x /usr/bin/prometheus ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "Installing Debian's prometheus for the metrics tests (apt-get)"; \
	  policy=/usr/sbin/policy-rc.d; restore=; \
	  if [ ! -e $$policy ]; then printf '#!/bin/sh\nexit 101\n' >$$policy && chmod +x $$policy && restore=1; fi; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	      prometheus; } >/tmp/tiffin-prometheus-deps.log 2>&1 \
	    || { tail -5 /tmp/tiffin-prometheus-deps.log; \
	         echo "Could not install prometheus: the metrics tests will be skipped (and fail under CI=true)"; }; \
	  if [ -n "$$restore" ]; then rm -f $$policy; fi; \
	else \
	  echo "$(PROMTOOL) is missing: run 'sudo apt-get install prometheus' to run the metrics tests;"; \
	  echo "without them they are skipped (and fail under CI=true)"; \
	fi

# The Patroni failover scenario (tests/scenarios/test_failover_patroni.py) runs a cluster of
# its own: one etcd and three Patroni members of PostgreSQL 15 on free ports in a throwaway
# directory. Debian's patroni and etcd-server are installed with apt when missing and we are
# root, with policy-rc.d refusing to start their system services (the test starts its own).
# Without them that scenario skips with the reason, except under CI=true, where it fails.
failover-deps: ## Install Debian's patroni and etcd-server for the failover scenario if they are missing
	@if command -v patroni >/dev/null && command -v etcd >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "Installing Debian's patroni and etcd-server for the failover scenario (apt-get)"; \
	  policy=/usr/sbin/policy-rc.d; restore=; \
	  if [ ! -e $$policy ]; then printf '#!/bin/sh\nexit 101\n' >$$policy && chmod +x $$policy && restore=1; fi; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	      patroni etcd-server python3-etcd; } >/tmp/tiffin-failover-deps.log 2>&1 \
	    || { tail -5 /tmp/tiffin-failover-deps.log; \
	         echo "Could not install patroni and etcd-server: the failover scenario will be skipped (and fail under CI=true)"; }; \
	  if [ -n "$$restore" ]; then rm -f $$policy; fi; \
	else \
	  echo "patroni or etcd is missing: run 'sudo apt-get install patroni etcd-server' to run the failover scenario;"; \
	  echo "without them it is skipped (and fail under CI=true)"; \
	fi

up: $(STAMP) ## Serve the admin (gunicorn + whitenoise) and run one worker on the local database (after make demo)
	deploy/local-up.sh

# The peers' comparison (bench/peers/cancellations.py, with the worker killed at each side's
# peak) runs with .venv-peers' python (bench-peers below); the rest with .venv's.
PEERS_VENV := .venv-peers
PEERS_STAMP := $(PEERS_VENV)/.installed
bench: $(STAMP) $(PEERS_STAMP) scenario-deps ## The benchmarks against their references and peers on PostgreSQL (bench/results/, docs/benchmark-tables.md; 40-50 min)
	PGHOST=127.0.0.1 scripts/ensure_postgres.sh
	$(PY) -m bench

bench-large: $(STAMP) ## The cost curves' largest sizes: 100,000 restaurants (20M orders), 5M carts (an hour or more)
	PGHOST=127.0.0.1 scripts/ensure_postgres.sh
	$(PY) -m bench --large

bench-history: $(STAMP) ## Every everyday path on 10M runs of history, then their prune (about half an hour)
	PGHOST=127.0.0.1 scripts/ensure_postgres.sh
	$(PY) -m bench history

# The cancellation benchmark beside procrastinate and Celery (bench/peers/): their packages
# go into a virtualenv of their own, never .venv, so nothing of them reaches the product,
# make test or CI's ruff and mypy. Redis database 9 at 127.0.0.1:6379 unless
# BENCH_PEERS_REDIS_URL names another (the Celery side flushes that database only).
# make bench runs it too, with --kill (the worker SIGKILLed at each side's peak and
# restarted): the default PEERS_ARGS; other options make a development run, e.g. --quick.
PEERS_ARGS ?= --kill
$(PEERS_STAMP): requirements.txt requirements-dev.txt requirements-peers.txt
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) not found; set PYTHON=/path/to/python3.11"; exit 1; }
	test -d $(PEERS_VENV) || $(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements-dev.txt -r requirements-peers.txt
	touch $(PEERS_STAMP)

bench-peers: $(PEERS_STAMP) scenario-deps ## Benchmark 3 beside procrastinate and Celery, in .venv-peers, as make bench runs it (docs/benchmark-peers.md; ~15 min)
	PGHOST=127.0.0.1 scripts/ensure_postgres.sh
	exec $(PEERS_VENV)/bin/python -m bench.peers.cancellations $(PEERS_ARGS)

# Benchmark 3 under a backlog (docs/benchmark-peers.md, "Under a backlog"): BACKLOG runs due
# over the next hour inserted up front, then the rush on top, beside the rush alone, in
# .venv-peers. PEER_BACKLOG for procrastinate and Celery (Celery holds every ETA task in
# its worker's memory: about 8 KiB each). Its databases are dropped at the end.
# More options in BACKLOG_ARGS, e.g. --only project --only celery or --rate 100.
BACKLOG ?= 1000000
PEER_BACKLOG ?= 100000
BACKLOG_ARGS ?= --only project --only procrastinate --only celery
bench-backlog: $(PEERS_STAMP) scenario-deps ## Benchmark 3 on a backlog of a million runs due over the next hour, beside the rush alone (~15 min)
	PGHOST=127.0.0.1 scripts/ensure_postgres.sh
	exec $(PEERS_VENV)/bin/python -m bench.peers.backlog --backlog $(BACKLOG) --peer-backlog $(PEER_BACKLOG) $(BACKLOG_ARGS)

# The alternatives table with the real tools (docs/alternatives.md, "The real tools"):
# celery beat on every server, beat with celery-redbeat's lock, django-q2's schedules on
# three clusters, procrastinate's periodic tasks on three workers, and the claim, through
# make compare's faults, in .venv-peers. A database of its own, dropped and created afresh;
# Redis database 10 at 127.0.0.1:6379 unless TIFFIN_ALTERNATIVES_REDIS_URL names another
# (each case flushes that database only). More options in COMPARE_PEERS_ARGS, e.g.
# "--only celery-redbeat --only claim" or "--faults none --duration 5".
COMPARE_PEERS_URL ?= postgres://postgres@127.0.0.1:5432/tiffin_compare_peers
COMPARE_PEERS_ARGS ?=
compare-peers: export DEBUG ?= 1
compare-peers: $(PEERS_STAMP) scenario-deps ## The alternatives table with celery beat, redbeat, django-q2 and procrastinate beside the claim, in .venv-peers (~17 min)
	PGHOST=127.0.0.1 scripts/ensure_postgres.sh
	$(call database_fresh,$(COMPARE_PEERS_URL))
	DATABASE_URL=$(COMPARE_PEERS_URL) DJANGO_SETTINGS_MODULE=bench.peers.alternatives_settings LOG_LEVEL=WARNING \
	  $(PEERS_VENV)/bin/python manage.py migrate --noinput --verbosity 0
	DATABASE_URL=$(COMPARE_PEERS_URL) LOG_LEVEL=WARNING exec $(PEERS_VENV)/bin/python -m bench.peers.alternatives \
	  --log-dir db/compare-peers-logs $(COMPARE_PEERS_ARGS)
# What a synchronous standby costs (docs/failover.md): commit latency and the cancellation
# benchmark's ceiling, standby synchronous against asynchronous, on a throwaway primary and
# standby of its own (PostgreSQL's server binaries: scenario-deps), never the machine's
# server. Not part of make bench or CI. More options in REPLICATION_ARGS, e.g. --rates 100,200.
REPLICATION_ARGS ?=
bench-replication: $(STAMP) scenario-deps ## A synchronous standby's cost: commit latency and the cancellation ceiling, sync against async (5-8 min)
	exec $(PY) -m bench.replication_cost $(REPLICATION_ARGS)

# A database of its own, dropped and created afresh (the soak empties what it finds).
SOAK_URL ?= postgres://postgres@127.0.0.1:5432/tiffin_soak
SOAK_DAYS ?= 30
soak: $(STAMP) ## Weeks of traffic and every job with retention at 3 days: row counts per day, invariants (slow; docs/history.md)
	PGHOST=127.0.0.1 scripts/ensure_postgres.sh
	$(call database_fresh,$(SOAK_URL))
	DATABASE_URL=$(SOAK_URL) exec $(PY) -m bench.soak --reset --days $(SOAK_DAYS)

# A database of its own, dropped and created afresh; every seed re-seeds it.
CHAOS_URL ?= postgres://postgres@127.0.0.1:5432/tiffin_chaos
CHAOS_SEEDS ?= 1-20
CHAOS_DURATION ?= 1h
CHAOS_SPEED ?= 60
# More options for simulation.chaos_table, e.g. --pooler (every process behind PgBouncer) or --chaos-rate 32.
CHAOS_ARGS ?=
chaos: export DEBUG ?= 1
chaos: $(STAMP) ## simulate --chaos for seeds 1-20 (an hour each at 60x): faults and invariants per seed (~40 min; docs/chaos.md)
	PGHOST=127.0.0.1 scripts/ensure_postgres.sh
	$(call database_fresh,$(CHAOS_URL))
	DATABASE_URL=$(CHAOS_URL) $(PY) manage.py migrate --noinput --verbosity 0
	DATABASE_URL=$(CHAOS_URL) exec $(PY) -m simulation.chaos_table --seeds $(CHAOS_SEEDS) --duration $(CHAOS_DURATION) --speed $(CHAOS_SPEED) $(CHAOS_ARGS)

# The primary killed under the running app, synchronous (Patroni) and asynchronous (a
# paused WAL sender), on throwaway clusters, in a dinner rush with gunicorn answering
# /healthz; a table of what each lost (docs/failover.md). `make test` runs it last
# (test-failover): exit 1 on a loss the mode must not have; exit 2 when Patroni, etcd or
# PostgreSQL 15's server binaries are missing, which skips it, except under CI=true.
FAILOVER_MODES ?= synchronous,asynchronous
failover: export DEBUG ?= 1
failover: $(STAMP) failover-deps ## Kill the database's primary under the app in each replication mode and print what it cost (~3 min)
	exec $(PY) -m tests.scenarios.failover_table --modes $(FAILOVER_MODES)

clean: ## Remove the virtual environment and the SQLite files
	rm -rf $(VENV) db staticfiles
