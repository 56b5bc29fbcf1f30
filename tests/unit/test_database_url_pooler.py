"""DATABASE_URL for a transaction-mode pooler: server-side cursors off, the flag kept
out of the driver's connection options, and a bad value refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from tiffin.env import database_from_url

BASE = Path("/srv/tiffin")


def test_it_disables_server_side_cursors_when_the_url_asks():
    db = database_from_url(
        "postgres://u@127.0.0.1:6432/t?disable_server_side_cursors=true&sslmode=disable", base_dir=BASE
    )
    assert db["DISABLE_SERVER_SIDE_CURSORS"] is True
    assert db["OPTIONS"] == {"sslmode": "disable"}


def test_it_keeps_server_side_cursors_by_default():
    db = database_from_url("postgres://u@127.0.0.1:5432/t", base_dir=BASE)
    assert db["DISABLE_SERVER_SIDE_CURSORS"] is False
    assert db["OPTIONS"] == {}


def test_it_refuses_a_flag_it_cannot_read():
    with pytest.raises(ImproperlyConfigured, match="disable_server_side_cursors='maybe'"):
        database_from_url("postgres://u@127.0.0.1:6432/t?disable_server_side_cursors=maybe", base_dir=BASE)
