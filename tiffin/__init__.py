"""The project's core: settings (``settings``, read from the environment by ``env``), the
clock every process shares (``clock``, accelerated in simulations), database helpers
(``db``), money (``money``: ``Decimal``, cents at the provider's edge only) and zones
(``tz``). It imports no app (tests/unit/test_import_rules.py)."""
