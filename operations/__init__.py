"""Operations: what people and monitors see of the engine, beside it.

The admin (job runs, schedules, the dashboard and its timelines), /healthz and /metrics,
the missed-run check and its alerts, the login-lockout alert, the history prune, and
``manage.py check_runs``. It reads the engine's tables and calls its services; the engine
(``scheduling``) imports nothing from here (tests/unit/test_import_rules.py). It has no
models: the admin registers the engine's, and their pages keep the engine's URLs.
"""
