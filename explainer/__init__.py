"""The cron explainer: a public tool that reads a five-field cron expression back in words,
lists its next fire times in UTC and in a zone, and warns of its traps (``explain``), as a
page at /cron/ (``views``) and as ``manage.py explain_cron``.

It reads no data and writes none: it has no models, and of the engine it imports only
``scheduling.cron``, the cron evaluation the scheduler itself fires by
(tests/unit/test_import_rules.py holds the rule).
"""
