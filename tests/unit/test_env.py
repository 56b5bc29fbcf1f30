"""The typed environment readers: defaults when unset, the value when readable, a loud
ImproperlyConfigured when not, and DATABASE_URL turned into a DATABASES entry."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from tiffin.env import database_from_url, env_bool, env_float, env_int, env_list, env_str

VAR = "TIFFIN_TEST_ENV_VALUE"


@pytest.fixture(autouse=True)
def _unset(monkeypatch):
    monkeypatch.delenv(VAR, raising=False)


def test_it_returns_the_default_when_the_variable_is_unset():
    assert env_str(VAR, "fallback") == "fallback"
    assert env_bool(VAR, True) is True
    assert env_int(VAR, 7, minimum=1) == 7
    assert env_float(VAR, 0.5) == 0.5
    assert env_list(VAR, ["a"]) == ["a"]


@pytest.mark.parametrize(("raw", "expected"), [("1", True), ("YES", True), (" on ", True), ("0", False), ("", False)])
def test_it_reads_booleans_in_their_usual_spellings(monkeypatch, raw, expected):
    monkeypatch.setenv(VAR, raw)
    assert env_bool(VAR, not expected) is expected


@pytest.mark.parametrize("raw", ["2", "ture", "enabled"])
def test_it_refuses_a_boolean_it_cannot_read(monkeypatch, raw):
    monkeypatch.setenv(VAR, raw)
    with pytest.raises(ImproperlyConfigured, match=rf"{VAR}='{raw}' is not a boolean"):
        env_bool(VAR, False)


def test_it_reads_an_integer(monkeypatch):
    monkeypatch.setenv(VAR, "600")
    assert env_int(VAR, 1, minimum=1) == 600


@pytest.mark.parametrize("raw", ["ten", "1.5", ""])
def test_it_refuses_an_integer_it_cannot_read(monkeypatch, raw):
    monkeypatch.setenv(VAR, raw)
    with pytest.raises(ImproperlyConfigured, match="is not an integer"):
        env_int(VAR, 1)


def test_it_refuses_an_integer_below_its_minimum(monkeypatch):
    monkeypatch.setenv(VAR, "0")
    with pytest.raises(ImproperlyConfigured, match="must be at least 1"):
        env_int(VAR, 5, minimum=1)


def test_it_refuses_a_float_it_cannot_read_or_below_its_minimum(monkeypatch):
    monkeypatch.setenv(VAR, "fast")
    with pytest.raises(ImproperlyConfigured, match="is not a number"):
        env_float(VAR, 1.0)
    monkeypatch.setenv(VAR, "0.001")
    with pytest.raises(ImproperlyConfigured, match=re.escape("must be at least 0.01")):
        env_float(VAR, 1.0, minimum=0.01)


@pytest.mark.parametrize("raw", ["nan", "inf", "-Infinity"])
def test_it_refuses_a_float_that_is_not_finite(monkeypatch, raw):
    monkeypatch.setenv(VAR, raw)  # float() reads them, and nan passes any minimum
    with pytest.raises(ImproperlyConfigured, match="is not a finite number"):
        env_float(VAR, 1.0, minimum=0.01)


def test_it_splits_a_list_on_commas_and_drops_empty_items(monkeypatch):
    monkeypatch.setenv(VAR, " a.example , ,b.example,")
    assert env_list(VAR, []) == ["a.example", "b.example"]


def test_it_turns_a_postgres_url_into_a_database_entry(tmp_path):
    db = database_from_url(
        "postgres://tiffin:p%40ss%2Fword@db.internal:6543/tiffin_prod?sslmode=require", base_dir=tmp_path
    )
    assert db["ENGINE"] == "django.db.backends.postgresql"
    assert (db["NAME"], db["USER"], db["PASSWORD"]) == ("tiffin_prod", "tiffin", "p@ss/word")
    assert (db["HOST"], db["PORT"]) == ("db.internal", "6543")
    assert db["OPTIONS"] == {"sslmode": "require", "server_side_binding": True, "prepare_threshold": 5}


def test_it_accepts_postgresql_and_a_url_without_port_or_password(tmp_path):
    db = database_from_url("postgresql://postgres@127.0.0.1/tiffin", base_dir=tmp_path)
    assert (db["NAME"], db["USER"], db["PASSWORD"], db["PORT"]) == ("tiffin", "postgres", "", "")


def test_it_refuses_a_postgres_url_without_a_database_name(tmp_path):
    with pytest.raises(ImproperlyConfigured, match="names no database"):
        database_from_url("postgres://postgres@127.0.0.1:5432/", base_dir=tmp_path)


def test_a_relative_sqlite_path_is_under_the_project_and_gets_wal_and_a_test_name(tmp_path):
    db = database_from_url("sqlite:///db/app.sqlite3", base_dir=tmp_path)
    assert db["ENGINE"] == "django.db.backends.sqlite3"
    assert db["NAME"] == str(tmp_path / "db" / "app.sqlite3")
    assert (tmp_path / "db").is_dir()  # created, so the first connection can open the file
    assert db["TEST"]["NAME"] == str(tmp_path / "db" / "test_app.sqlite3")
    assert db["OPTIONS"]["transaction_mode"] == "IMMEDIATE"
    assert "journal_mode=WAL" in db["OPTIONS"]["init_command"]


def test_an_absolute_sqlite_path_stays_absolute(tmp_path):
    target = tmp_path / "elsewhere" / "x.sqlite3"
    db = database_from_url(f"sqlite:///{target}", base_dir=Path("/nonexistent-base"))
    assert db["NAME"] == str(target)


@pytest.mark.parametrize("url", ["mysql://root@localhost/tiffin", "tiffin.sqlite3"])
def test_it_refuses_a_database_url_with_an_unsupported_scheme(tmp_path, url):
    with pytest.raises(ImproperlyConfigured, match="unsupported scheme"):
        database_from_url(url, base_dir=tmp_path)


def test_a_postgres_url_with_several_hosts_gives_libpq_its_lists_of_hosts_and_ports(tmp_path):
    db = database_from_url(
        "postgres://postgres@127.0.0.1:5432,127.0.0.1:5433,[::1]:5434/tiffin?target_session_attrs=read-write",
        base_dir=tmp_path,
    )
    assert (db["HOST"], db["PORT"]) == ("127.0.0.1,127.0.0.1,::1", "5432,5433,5434")
    assert (db["NAME"], db["USER"]) == ("tiffin", "postgres")
    assert db["OPTIONS"]["target_session_attrs"] == "read-write"


def test_a_host_without_a_port_keeps_its_place_in_the_list_of_ports(tmp_path):
    db = database_from_url("postgres://postgres@a.internal,b.internal:6543/tiffin", base_dir=tmp_path)
    assert (db["HOST"], db["PORT"]) == ("a.internal,b.internal", ",6543")


@pytest.mark.parametrize("url", ["postgres://u@h1:5432,h2:port/db", "postgres://u@h1:5432,h2:70000/db"])
def test_it_refuses_a_list_of_hosts_with_a_port_it_cannot_read(tmp_path, url):
    with pytest.raises(ImproperlyConfigured, match="is not a port number"):
        database_from_url(url, base_dir=tmp_path)


def test_it_refuses_an_empty_host_in_a_list_of_hosts(tmp_path):
    with pytest.raises(ImproperlyConfigured, match="empty host"):
        database_from_url("postgres://u@h1:5432,,h3/db", base_dir=tmp_path)
