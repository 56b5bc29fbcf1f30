"""What the tests, the simulation and the benchmarks share, each in one place:

- ``ports``: a free local port for a server a test or benchmark starts;
- ``processes``: child processes in process groups of their own (start, wait for a
  condition or for progress, stop however the caller ends), the accelerated clock's
  environment for them;
- ``pgbouncer``: a PgBouncer in transaction mode in front of a PostgreSQL server;
- ``databases``: databases created, cloned from a migrated template, and dropped.

Development and test code only: the product never imports it
(tests/unit/test_import_rules.py), and no server needs it.
"""
