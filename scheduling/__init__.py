"""The engine: clock-driven jobs claimed once in ``job_runs`` and run by django-q2 workers.

It owns the declaration of jobs (``registry``), cron evaluation (``cron``), the claim and
the enqueue (``dispatch``, ``queries``, ``sql``, ``queue``; SQLite's versions apart in
``queries_sqlite`` and ``sql_sqlite``), the policies (``policies``),
the start under a fencing token and the handler's context (``execution``, ``context``,
``fencing``), the end of a run (``transitions``), the scheduler loop (``loop``) and the
pings to an outside monitor (``pings``). The README's "The engine in reading order" is
the path through it.

What it may import: Django, django-q2, prometheus_client and ``tiffin`` (the core). Never a
business app (orders, carts, payouts, transfers, statements, simulation, demo), never
``operations`` (the admin, metrics scrape, monitoring and retention beside it) nor
``explainer``: those import the engine (tests/unit/test_import_rules.py).

Names: a service is subject first, as in the HackSoft styleguide (``runs_claim``,
``runs_start``, ``pass_work_find``); a function of ``sql`` is named after the statement
of ``queries`` it runs, verb first (``claim_runs`` runs ``CLAIM_RUNS``). "Fence" and
"token" are the fencing token of a run, never a credential; "queue" is django-q2's task
queue (``queue``, ``queue_bulk``), and otherwise only the overlap policy of that name
(``overlap="queue"``: a run waits for the one running).
"""
