"""The statement template's system check (statements.E001) holds on every backend what
PostgreSQL's INSERT needs to render a body."""

from __future__ import annotations

import pytest

from statements import checks
from statements.services import statement_template


def test_the_shipped_template_passes() -> None:
    assert checks.check_statement_template_renders_in_sql() == []


@pytest.mark.parametrize(
    "template",
    ["Week {week}: net {net:>12}.\n", "{restaurant} was paid.\n", "Net {net}", "Gross {gross!r} paid.\n"],
    ids=["format-spec", "starts-with-a-field", "ends-with-a-field", "conversion"],
)
def test_a_template_sql_cannot_render_is_refused(template: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checks, "statement_template", lambda: template)
    (error,) = checks.check_statement_template_renders_in_sql()
    assert error.id == "statements.E001"
    assert "statement_body.txt" in error.msg


def test_an_unknown_field_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checks, "statement_template", lambda: statement_template().replace("{net}", "{nett}"))
    (error,) = checks.check_statement_template_renders_in_sql()
    assert "{nett}" in error.msg
