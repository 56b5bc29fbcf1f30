"""Settings for the tiffin project, read from the environment (see ``.env.example``).

Every value a deployment may change comes through a typed helper in ``tiffin.env``
that refuses a value it cannot read.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from tiffin import tz
from tiffin.env import (
    database_from_url,
    env_bool,
    env_float,
    env_int,
    env_list,
    env_lockout_parameters,
    env_networks,
    env_prefixed,
    env_secret_key,
    env_str,
)

# Before any zone is loaded: every server reads the pinned tzdata package, never the OS's
# zone files (tiffin/tz.py says why).
tz.use_pinned_tzdata()

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("DEBUG", False)
_INSECURE_DEV_KEY = "django-insecure-tiffin-development-only-key-do-not-use-in-production"
SECRET_KEY = env_secret_key("SECRET_KEY", debug=DEBUG, development_key=_INSECURE_DEV_KEY)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_q",
    "axes",
    "tiffin.apps.TiffinConfig",
    "scheduling.apps.SchedulingConfig",
    "operations.apps.OperationsConfig",
    "orders.apps.OrdersConfig",
    "carts.apps.CartsConfig",
    "payouts.apps.PayoutsConfig",
    "statements.apps.StatementsConfig",
    "transfers.apps.TransfersConfig",
    "explainer.apps.ExplainerConfig",
    # The demo's commands (seed_demo, demo_summary; no tables). ``simulate`` is a
    # development tool: DEVELOPMENT below installs it.
    "demo.apps.DemoConfig",
]

MIDDLEWARE = [
    # First: /healthz answers probes before host validation and the HTTPS redirect.
    "operations.middleware.HealthzMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: turns a refused login into its 429 answer.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "tiffin.urls"
WSGI_APPLICATION = "tiffin.wsgi.application"
ASGI_APPLICATION = "tiffin.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# The zero-setup default is a SQLite file in the project folder; production sets a
# postgres:// URL. See tiffin.env.database_from_url for the SQLite options.
DATABASE_URL = env_str("DATABASE_URL", "sqlite:///db/tiffin.sqlite3")
DATABASES = {"default": database_from_url(DATABASE_URL, base_dir=BASE_DIR)}
# Seconds a connection is kept for reuse; 0 closes it after each request, task and broker
# poll. Long-lived worker processes do better with 60: django-q2's ORM broker otherwise
# opens a new connection for every poll (ten a second, idle or not) and every task starts
# on a fresh backend (bench/cancellations.py runs its workers that way). Health checks
# replace a connection that died (a database restart) before it is reused.
DATABASES["default"]["CONN_MAX_AGE"] = env_int("DATABASE_CONN_MAX_AGE", 0, minimum=0)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# The payout index INCLUDEs total for index-only scans on PostgreSQL; SQLite ignores it.
SILENCED_SYSTEM_CHECKS = ["models.W040"]

# django-axes first: a client that is locked out is refused before any backend hashes
# the password it sent (hashing is the expensive part of a login, 0.25-1 s here).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
# Storage and computation are in UTC; local time appears only in business rules and
# display. tiffin.checks refuses to start otherwise.
TIME_ZONE = "UTC"
USE_TZ = True
USE_I18N = True
# Instants written "2026-11-22 18:30 UTC", never unlabelled (tiffin/formats/en/formats.py).
FORMAT_MODULE_PATH = ["tiffin.formats"]

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
if DEBUG:
    STORAGES["staticfiles"] = {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}

# Security: strict unless DEBUG. Behind a TLS-terminating proxy set SECURE_PROXY_SSL_HEADER.
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", not DEBUG)
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", not DEBUG)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 31536000, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", not DEBUG)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", not DEBUG)
if env_bool("BEHIND_TLS_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]

# The reverse proxies whose X-Forwarded-For is believed (addresses or networks, comma-separated).
# Empty: the connecting address is the client, whatever the header says (tiffin.client_ip).
TRUSTED_PROXIES = env_networks("TRUSTED_PROXIES", [])

# Explanations one client may ask for per minute on the public cron explainer (/cron/):
# typing (the page asks again a quarter of a second after each pause) stays well under
# it, a script hammering the evaluator does not. Staff are not capped.
CRON_EXPLAINER_REQUESTS_PER_MINUTE = env_int("CRON_EXPLAINER_REQUESTS_PER_MINUTE", 120, minimum=1)

# --- Admin login lockout (django-axes; docs/configuration.md) ----------------------------
# After LOGIN_FAILURE_LIMIT failed logins counted against one client address or one
# username, logins from that address or for that username are refused for
# LOGIN_LOCKOUT_SECONDS after the last counted failure (operations.lockouts alerts once).
AXES_FAILURE_LIMIT = env_int("LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(seconds=env_int("LOGIN_LOCKOUT_SECONDS", 900, minimum=1))
AXES_LOCKOUT_PARAMETERS = env_lockout_parameters("LOGIN_LOCKOUT_BY", ["ip_address", "username"])
AXES_CLIENT_IP_CALLABLE = "tiffin.client_ip.client_ip_address"
# A refused attempt during a lockout writes nothing and does not extend it: a locked-out
# client costs one indexed read, and cannot grow the attempt's row.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
# A successful login clears nothing: django-axes would delete every failure of the
# address, so a guesser with an account of its own could reset its count by logging in.
AXES_RESET_ON_SUCCESS = False

ADMINS = [("Tiffin operators", address) for address in env_list("ADMIN_EMAILS", [])]
SERVER_EMAIL = env_str("SERVER_EMAIL", "tiffin@localhost")
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
# The SMTP server Django's SMTP backend speaks to (statements, and the alert mails when
# EMAIL_BACKEND is the SMTP one). EMAIL_TIMEOUT bounds each socket operation, so a hung
# server is an error the sender retries, not a run stuck for ever.
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", False)
if EMAIL_USE_TLS and EMAIL_USE_SSL:
    raise ImproperlyConfigured("EMAIL_USE_TLS and EMAIL_USE_SSL are both on: set one (STARTTLS or implicit TLS)")
EMAIL_TIMEOUT = env_float("EMAIL_TIMEOUT", 30.0, minimum=0.1)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "statements@localhost")

# --- Statements: the weekly email of each payout (statements/, docs/statements.md) ------
# Statements go over SMTP, whatever EMAIL_BACKEND says for alerts: the outbox's promise
# (at least once, one stable Message-ID) is about a real mail server. With the development
# tools on (below) they are written as files under EMAIL_FILE_PATH unless one is named.
STATEMENTS_EMAIL_BACKEND = env_str("STATEMENTS_EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_FILE_PATH = env_str("EMAIL_FILE_PATH", str(BASE_DIR / "db" / "mail"))
# The right-hand side of every statement's Message-ID: a domain you own, never changed
# once statements went out (a receiver drops duplicates by the whole id).
STATEMENTS_MESSAGE_ID_DOMAIN = env_str("STATEMENTS_MESSAGE_ID_DOMAIN", "statements.tiffin.invalid")
# Statements taken per pass of send-statements (the run heartbeats after each pass).
STATEMENTS_BATCH_SIZE = env_int("STATEMENTS_BATCH_SIZE", 200, minimum=1)
# Backoff after a failed send: base * 2^(attempt - 1) seconds, capped.
STATEMENTS_RETRY_BASE_SECONDS = env_float("STATEMENTS_RETRY_BASE_SECONDS", 60.0, minimum=0.0)
STATEMENTS_RETRY_MAX_SECONDS = env_float("STATEMENTS_RETRY_MAX_SECONDS", 3600.0, minimum=0.0)
# A statement still unsent this long after it was written is a problem of check_runs.
STATEMENTS_UNSENT_GRACE_SECONDS = env_int("STATEMENTS_UNSENT_GRACE_SECONDS", 86400, minimum=0)

# One line per record, on the root's handler. Django's own default gives the "django"
# logger a console handler of its own (with DEBUG on) as well as passing records up to the
# root, so each 404 was printed twice; here "django" keeps only the error mail to ADMINS
# (with DEBUG off, as Django's default does) and its records reach the console once.
LOG_LEVEL = env_str("LOG_LEVEL", "INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "filters": {"require_debug_false": {"()": "django.utils.log.RequireDebugFalse"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain"},
        "mail_admins": {
            "class": "django.utils.log.AdminEmailHandler",
            "level": "ERROR",
            "filters": ["require_debug_false"],
        },
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "django": {"handlers": ["mail_admins"], "level": LOG_LEVEL},
        "django_q": {"level": env_str("DJANGO_Q_LOG_LEVEL", "WARNING")},
        # django-axes: each failed login and lockout is a warning; its start banner and
        # per-request notes (INFO) would fill every command's output.
        "axes": {"level": "WARNING"},
        # The stripe library logs every request and response at INFO: two lines per call, in
        # the worker's log and in `make demo`'s report; the transfers app logs what matters.
        "stripe": {"level": "WARNING"},
    },
}

# --- Business rules -------------------------------------------------------------------
# Minutes a restaurant has to accept or reject an order before it is cancelled.
ORDER_ACCEPT_TIMEOUT_SECONDS = env_int("ORDER_ACCEPT_TIMEOUT_SECONDS", 600, minimum=1)
# A business week is payable once its end plus this delay has passed.
PAYOUT_SETTLEMENT_DELAY_SECONDS = env_int("PAYOUT_SETTLEMENT_DELAY_SECONDS", 1800, minimum=0)
CART_STALE_DAYS = env_int("CART_STALE_DAYS", 7, minimum=1)
# Rows per transaction of each job's batches (a job passes its own to its service).
# Carts deleted per clean-up batch.
CART_CLEANUP_BATCH_SIZE = env_int("CART_CLEANUP_BATCH_SIZE", 5000, minimum=1)
# Restaurants paid per transaction (each batch heartbeats): large enough that the
# per-statement overhead vanishes, small enough that one batch holds its locks for well
# under a second. The demo sets 1, so its payout run lasts long enough to crash in.
PAYOUT_BATCH_SIZE = env_int("PAYOUT_BATCH_SIZE", 2500, minimum=1)
# Overdue orders the stale-order safety net cancels per transaction.
ORDER_CANCEL_BATCH_SIZE = env_int("ORDER_CANCEL_BATCH_SIZE", 500, minimum=1)

# --- Transfers: payouts sent to the payment provider (transfers/, docs/transfers.md) -----
# The provider's API (Stripe's, or provider_sandbox's address) and its secret key. The
# official ``stripe`` library talks to it, so a real Stripe key and
# https://api.stripe.com pay through Stripe with the same code. Empty: no provider is
# configured; transfers are written and wait (check_runs reports them after a day).
PAYMENT_PROVIDER_URL = env_str("PAYMENT_PROVIDER_URL", "").strip()
PAYMENT_PROVIDER_KEY = env_str("PAYMENT_PROVIDER_KEY", "sk_test_tiffin_sandbox")
# Seconds one request to the provider may take before its outcome counts as unknown.
PAYMENT_PROVIDER_TIMEOUT_SECONDS = env_float("PAYMENT_PROVIDER_TIMEOUT_SECONDS", 30.0, minimum=0.1)
# How long the provider remembers an idempotency key (Stripe: at least 24 h). Past it a
# transfer is looked up at the provider before anything is sent again.
PAYMENT_PROVIDER_KEY_RETENTION_SECONDS = env_int("PAYMENT_PROVIDER_KEY_RETENTION_SECONDS", 86400, minimum=60)
# A lookup that finds no transfer allows sending again (same key) only once the last
# attempt is this old: no request of ours can still be in flight at the provider.
TRANSFERS_LOOKUP_QUIET_SECONDS = env_int("TRANSFERS_LOOKUP_QUIET_SECONDS", 900, minimum=0)
# The currency of every transfer (ISO 4217, lower case as Stripe writes it).
PAYMENT_CURRENCY = env_str("PAYMENT_CURRENCY", "inr").strip().lower()
# Transfers sent at once by one send-transfers run (threads), and taken per pass.
TRANSFERS_CONCURRENCY = env_int("TRANSFERS_CONCURRENCY", 8, minimum=1)
TRANSFERS_BATCH_SIZE = env_int("TRANSFERS_BATCH_SIZE", 200, minimum=1)
# Backoff after an unknown outcome: base * 2^(attempt - 1) seconds, capped.
TRANSFERS_RETRY_BASE_SECONDS = env_float("TRANSFERS_RETRY_BASE_SECONDS", 30.0, minimum=0.0)
TRANSFERS_RETRY_MAX_SECONDS = env_float("TRANSFERS_RETRY_MAX_SECONDS", 3600.0, minimum=0.0)
# The daily reconciliation compares the provider's transfers of the last WINDOW days with
# the ledger (0: all of them); a positive payout not sent after GRACE seconds is a problem.
TRANSFERS_RECONCILE_WINDOW_DAYS = env_int("TRANSFERS_RECONCILE_WINDOW_DAYS", 35, minimum=0)
TRANSFERS_RECONCILE_GRACE_SECONDS = env_int("TRANSFERS_RECONCILE_GRACE_SECONDS", 86400, minimum=0)

# --- Scheduling engine ----------------------------------------------------------------
# Longest sleep of the scheduler loop, so a new delayed run is noticed within this time.
SCHEDULER_POLL_SECONDS = env_float("SCHEDULER_POLL_SECONDS", 1.0, minimum=0.01)
# How far back a tick pass looks for missed ticks of a cron job.
SCHEDULER_LOOKBACK_SECONDS = env_int("SCHEDULER_LOOKBACK_SECONDS", 35 * 24 * 3600, minimum=60)
# Most missed ticks one pass claims for one job (the rest come in later passes).
SCHEDULER_MAX_TICKS_PER_PASS = env_int("SCHEDULER_MAX_TICKS_PER_PASS", 500, minimum=1)
# Most due delayed runs and retries one pass enqueues (the loop comes back at once if full).
SCHEDULER_DUE_BATCH = env_int("SCHEDULER_DUE_BATCH", 2000, minimum=1)
# Delayed runs due within this long after a pass wait for the next one, so a stream of runs
# due milliseconds apart is dispatched a few times a second in batches (cron ticks are exact).
SCHEDULER_DUE_WINDOW_SECONDS = env_float("SCHEDULER_DUE_WINDOW_SECONDS", 0.25, minimum=0.0)
# A run still 'enqueued' after this long gets another task (a lost task; duplicates are harmless).
SCHEDULER_REQUEUE_AFTER_SECONDS = env_int("SCHEDULER_REQUEUE_AFTER_SECONDS", 600, minimum=1)

# --- Development tools (docs/configuration.md) ------------------------------------------
# On with DEBUG, or with TIFFIN_DEVELOPMENT=1 where DEBUG stays off as in production (the
# test suite, the benchmarks). Off, a server holds only the product: no ``simulation`` app
# (``simulate`` and its probe table), no Redis, no job modules from the environment.
DEVELOPMENT = env_bool("TIFFIN_DEVELOPMENT", DEBUG)
# Extra modules declaring jobs, imported at start (simulate's probes, the scenarios' and
# the benchmarks' test-only jobs, in the processes they start).
SCHEDULER_EXTRA_JOB_MODULES: list[str] = []
if DEVELOPMENT:
    INSTALLED_APPS.append("simulation.apps.SimulationConfig")
    # A laptop, the demo and the scenarios have no mail server: statements are written as
    # files, one per message, under EMAIL_FILE_PATH (db/mail/), unless a backend is named.
    STATEMENTS_EMAIL_BACKEND = env_str("STATEMENTS_EMAIL_BACKEND", "django.core.mail.backends.filebased.EmailBackend")
    SCHEDULER_EXTRA_JOB_MODULES = env_list("SCHEDULER_EXTRA_JOB_MODULES", [])
    # The Redis that `simulate --strategy redis-lock` takes its lock on (nothing else uses
    # Redis; redis is in requirements-dev.txt).
    REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")
elif env_list("SCHEDULER_EXTRA_JOB_MODULES", []):
    # Refused, not ignored: a server would otherwise start without jobs its operator named.
    raise ImproperlyConfigured(
        "SCHEDULER_EXTRA_JOB_MODULES is a development setting (test-only jobs): set TIFFIN_DEVELOPMENT=1 "
        "or DEBUG=1 to use it, or unset it on a server"
    )

# --- History and retention (operations.retention, the hourly prune-history job) ----------
# Finished runs (succeeded, skipped, superseded) and their events are kept this many days
# (a job may say otherwise: @job(retention_days=...)); dead runs the longer DEAD period.
SCHEDULER_RUN_RETENTION_DAYS = env_int("SCHEDULER_RUN_RETENTION_DAYS", 14, minimum=1)
SCHEDULER_DEAD_RUN_RETENTION_DAYS = env_int("SCHEDULER_DEAD_RUN_RETENTION_DAYS", 90, minimum=1)
# Resolved alerts, and scheduler nodes whose last pass is older than this, are forgotten.
SCHEDULER_ALERT_RETENTION_DAYS = env_int("SCHEDULER_ALERT_RETENTION_DAYS", 30, minimum=1)
SCHEDULER_NODE_RETENTION_DAYS = env_int("SCHEDULER_NODE_RETENTION_DAYS", 7, minimum=1)
# django-axes' logs of admin logins and failed logins are forgotten after this many days
# (its failed-login counts once the lockout's cool-off has passed).
LOGIN_LOG_RETENTION_DAYS = env_int("LOGIN_LOG_RETENTION_DAYS", 30, minimum=1)
# Runs per prune transaction (with their events): short, so no lock is held for long
# (batches of 2,000 missed benchmark 6's 100 ms goal: docs/benchmark-history.md).
SCHEDULER_PRUNE_BATCH_SIZE = env_int("SCHEDULER_PRUNE_BATCH_SIZE", 500, minimum=1)
# The prune job rests this long after each batch, so back-to-back deletes do not crowd
# out claims and order placements on a small machine (bench.history measures both).
SCHEDULER_PRUNE_PAUSE_SECONDS = env_float("SCHEDULER_PRUNE_PAUSE_SECONDS", 0.1, minimum=0.0)

# --- Monitoring (operations.monitoring, operations.alerts, scheduling.pings) -------------
# The missed-run check judges the ticks of the last WINDOW seconds, except the newest
# GRACE seconds (a tick that young may simply not have been claimed or started yet).
SCHEDULER_CHECK_WINDOW_SECONDS = env_int("SCHEDULER_CHECK_WINDOW_SECONDS", 24 * 3600, minimum=60)
SCHEDULER_CHECK_GRACE_SECONDS = env_int("SCHEDULER_CHECK_GRACE_SECONDS", 300, minimum=0)
# Each new problem is POSTed as JSON here (Slack-style incoming webhook, PagerDuty bridge...).
SCHEDULER_WEBHOOK_URL = env_str("SCHEDULER_WEBHOOK_URL", "")
SCHEDULER_WEBHOOK_TIMEOUT_SECONDS = env_float("SCHEDULER_WEBHOOK_TIMEOUT_SECONDS", 5.0, minimum=0.1)
# healthchecks.io-style ping URLs per job, from SCHEDULER_PING_URL_<JOB_NAME_UPPER_SNAKE>
# (weekly-payouts -> SCHEDULER_PING_URL_WEEKLY_PAYOUTS): requested after each success,
# and <url>/fail after a run dies.
SCHEDULER_PING_URLS = env_prefixed("SCHEDULER_PING_URL_")
SCHEDULER_PING_TIMEOUT_SECONDS = env_float("SCHEDULER_PING_TIMEOUT_SECONDS", 5.0, minimum=0.1)
# /healthz answers 503 when the newest scheduler pass is older than this.
SCHEDULER_HEALTHZ_MAX_AGE_SECONDS = env_float(
    "SCHEDULER_HEALTHZ_MAX_AGE_SECONDS", 3 * SCHEDULER_POLL_SECONDS + 60, minimum=1
)

# --- Metrics (scheduling.metrics, /metrics for Prometheus; docs/metrics.md) ---------------
# Off unless enabled. With a token set, a scrape must send "Authorization: Bearer <token>".
METRICS_ENABLED = env_bool("METRICS_ENABLED", False)
METRICS_BEARER_TOKEN = env_str("METRICS_BEARER_TOKEN", "")
# Where every process of this server (gunicorn's and django-q2's forked workers) writes its
# counters for /metrics to add up; emptied when the first of them starts. Empty: each
# process reports only its own counts (right for a single process only).
METRICS_MULTIPROC_DIR = env_str("METRICS_MULTIPROC_DIR", "")
# When set, `manage.py worker` also answers /metrics on this port (and nothing else), for
# deployments whose workers share no directory with a web server (a Kubernetes pod each).
METRICS_WORKER_PORT = env_int("METRICS_WORKER_PORT", 0, minimum=0)
METRICS_WORKER_HOST = env_str("METRICS_WORKER_HOST", "127.0.0.1")

# django-q2: the ORM broker on the default database, so an enqueue inside a transaction
# commits or rolls back with the claim. job_runs owns retries: failures are acknowledged
# and a task is attempted once by django-q2; its own scheduler is off (ours replaces it).
# A cluster takes up to queue_limit tasks ahead of its workers (django-q2's default: the
# workers squared), plus one its pusher holds; a taken task is handed out again once
# `retry` real seconds pass without its acknowledgement, so retry must outlast its wait
# behind those as well as its own run (simulate sets both from the clock's speed).
# save_limit: django-q2 keeps that many successful tasks (0: all, never pruned; -1: none),
# and to prune it reads and row-locks every one it keeps, unpickling each, on every task
# it saves. At 1,000 that cost a delayed-run batch of 200 cancellations about 0.04 s of
# the worker's CPU per 1,000 orders and tripled their lateness (bench/worker_cost.py,
# docs/benchmark-methods.md); every run's outcome is in job_runs and its events anyway.
_Q_WORKERS = env_int("Q_WORKERS", 2, minimum=1)
Q_CLUSTER = {
    "name": "tiffin",
    "orm": "default",
    "workers": _Q_WORKERS,
    "queue_limit": env_int("Q_QUEUE_LIMIT", _Q_WORKERS**2, minimum=1),
    "timeout": env_int("Q_TIMEOUT_SECONDS", 1800, minimum=1),
    "retry": env_int("Q_RETRY_SECONDS", 1860, minimum=2),
    "max_attempts": 1,
    "ack_failures": True,
    "save_limit": env_int("Q_SAVE_LIMIT", 100, minimum=-1),
    "poll": env_float("Q_POLL_SECONDS", 0.1, minimum=0.01),
    "scheduler": False,
    "catch_up": False,
    "label": "Task queue",
}
