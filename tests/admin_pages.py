"""The marks of a test module whose tests read admin pages: the ``admin_pages`` fixture
(tests/conftest.py: plain HTTP, static files without collectstatic's manifest), and no
warning about the static root WhiteNoise looks for."""

from __future__ import annotations

import pytest

ADMIN_PAGES = [
    pytest.mark.filterwarnings("ignore:No directory at:UserWarning"),
    pytest.mark.usefixtures("admin_pages"),
]
