"""Browser tests: the admin in Debian's Chromium (/usr/bin/chromium) through Playwright.

No browser is ever downloaded: ``make browser-deps`` (a step of ``make test``) installs
Debian's chromium with apt when it is missing. Where it cannot be installed these tests
skip and say why, except under CI=true, where a missing browser is a failure.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# A laptop's screen: every admin list must fit its width.
VIEWPORT = {"width": 1280, "height": 800}
# The README's screenshots are rewritten only on request (`make screenshots`), so a test
# run leaves the work tree clean; otherwise they go to a scratch folder.
DOCS = (
    Path(__file__).resolve().parents[2] / "docs"
    if os.environ.get("TIFFIN_SCREENSHOTS") == "1"
    else Path(tempfile.gettempdir()) / "tiffin-screenshots"
)


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and the browser tests cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """One headless Debian Chromium per test module.

    Playwright's sync API keeps an asyncio loop on this thread while it is started, and
    Django then refuses every ORM call on the thread as "async unsafe" (the test's own
    setup, and the database flush after each test). These calls are plain synchronous
    code, so the guard is lifted for exactly as long as Playwright runs: module scope,
    so the rest of the suite never runs under a started Playwright.
    """
    if not CHROMIUM.exists():
        _unavailable(f"{CHROMIUM} is missing: run `make browser-deps` (as root), or `sudo apt-get install chromium`")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as error:
        _unavailable(f"Playwright is not installed ({error}): `pip install -r requirements-dev.txt`")
    with pytest.MonkeyPatch.context() as patch, sync_playwright() as playwright:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(chromium: Any, live_server: Any, settings: Any) -> Iterator[Any]:
    """A fresh browser context on the live server, which speaks plain HTTP."""
    settings.SECURE_SSL_REDIRECT = False
    settings.SESSION_COOKIE_SECURE = settings.CSRF_COOKIE_SECURE = False
    # Static files come from the apps' folders (no collectstatic manifest in tests).
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    _reload_middleware(live_server)
    context = chromium.new_context(
        base_url=live_server.url, viewport={"width": VIEWPORT["width"], "height": VIEWPORT["height"]}
    )
    context.set_default_timeout(15_000)
    page = context.new_page()
    try:
        yield page
    finally:
        context.close()


def _reload_middleware(live_server: Any) -> None:
    """Give the (session-wide) live server a handler built under this test's settings.

    SecurityMiddleware reads SECURE_SSL_REDIRECT once, when the handler is built, and the
    live server built it at its start with the production default (redirect to HTTPS).
    """
    from django.core.handlers.wsgi import WSGIHandler
    from django.test.testcases import _MediaFilesHandler

    thread = live_server.thread
    thread.httpd.set_app(thread.static_handler(_MediaFilesHandler(WSGIHandler())))
