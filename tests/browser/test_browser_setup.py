"""Without Chromium the browser tests skip and say why, except under CI=true, where they fail."""

from __future__ import annotations

import pytest

from tests.browser.conftest import _unavailable


def test_a_missing_browser_skips_with_the_reason_on_a_workstation(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="chromium is missing"):
        _unavailable("/usr/bin/chromium is missing")


def test_a_missing_browser_fails_under_ci(monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true and the browser tests cannot run: chromium is missing"):
        _unavailable("chromium is missing")
