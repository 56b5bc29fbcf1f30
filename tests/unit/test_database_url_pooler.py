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
    # A prepared statement lives on one server connection: never behind the pooler.
    assert db["OPTIONS"] == {"sslmode": "disable", "server_side_binding": True, "prepare_threshold": None}


def test_it_keeps_server_side_cursors_by_default():
    db = database_from_url("postgres://u@127.0.0.1:5432/t", base_dir=BASE)
    assert db["DISABLE_SERVER_SIDE_CURSORS"] is False
    assert db["OPTIONS"] == {"server_side_binding": True, "prepare_threshold": 5}


def test_it_takes_the_prepare_threshold_from_the_url():
    assert database_from_url("postgres://u@h/t?prepare_threshold=0", base_dir=BASE)["OPTIONS"]["prepare_threshold"] == 0
    none = database_from_url("postgres://u@h/t?prepare_threshold=none", base_dir=BASE)
    assert none["OPTIONS"]["prepare_threshold"] is None


def test_it_binds_on_the_client_when_the_url_asks():
    db = database_from_url("postgres://u@h/t?server_side_binding=false", base_dir=BASE)
    assert db["OPTIONS"]["server_side_binding"] is False
    with pytest.raises(ImproperlyConfigured, match="server_side_binding='maybe' is not a boolean"):
        database_from_url("postgres://u@h/t?server_side_binding=maybe", base_dir=BASE)


def test_it_refuses_a_prepare_threshold_it_cannot_read():
    with pytest.raises(ImproperlyConfigured, match="prepare_threshold='-1' is not a whole number"):
        database_from_url("postgres://u@h/t?prepare_threshold=-1", base_dir=BASE)


def test_it_refuses_a_flag_it_cannot_read():
    with pytest.raises(ImproperlyConfigured, match="disable_server_side_cursors='maybe'"):
        database_from_url("postgres://u@127.0.0.1:6432/t?disable_server_side_cursors=maybe", base_dir=BASE)
