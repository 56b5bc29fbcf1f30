"""The statement template's system check."""

from __future__ import annotations

from typing import Any

from django.core.checks import Error, register

from statements.services import statement_template
from statements.sql import body_format


@register()
def check_statement_template_renders_in_sql(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Refuse to start on a template PostgreSQL cannot render: the payout pass renders each
    body in its INSERT (``statements.sql.body_format``), which takes only the known fields,
    with no format spec or conversion, between leading and trailing text. Checked on every
    backend, so a template that works on SQLite does not fail the weekly payouts on PostgreSQL."""
    try:
        body_format(statement_template())
    except ValueError as refused:
        return [
            Error(
                f"statements/statement_body.txt: {refused}.",
                hint="Use only the fields docs/statements.md lists, as plain {name}.",
                id="statements.E001",
            )
        ]
    return []
