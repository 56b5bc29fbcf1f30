"""Typed readers for settings that come from the environment.

Each helper fails loudly (``ImproperlyConfigured``) on a value it cannot read, so a
typo in a deployment stops the process at start instead of running with a default.
"""

from __future__ import annotations

import ipaddress
import math
import os
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured


def settings_load_or_exit() -> None:
    """Load the settings now, at a process's start (``manage.py``, gunicorn's master): a
    value they refuse stops the process with its message on one line and exit status 1,
    not a traceback (from every web worker)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tiffin.settings")
    from django.conf import settings

    try:
        settings.INSTALLED_APPS  # noqa: B018
    except ImproperlyConfigured as exc:
        sys.exit(f"configuration error: {exc}")


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_secret_key(name: str, *, debug: bool, development_key: str) -> str:
    """The secret key: required when ``debug`` is off, where a missing key would sign
    sessions, password resets and queued tasks with a key anyone can read in this
    repository. With ``debug`` on (local development only) ``development_key`` stands in."""
    value = os.environ.get(name, "").strip()
    if debug:
        return value or development_key
    if not value or value == development_key:
        raise ImproperlyConfigured(
            f"{name} is {'the development key' if value else 'not set'} and DEBUG is off: set {name} to a long "
            "random value (python -c 'import secrets; print(secrets.token_urlsafe(50))'), or DEBUG=1 for local "
            "development, which uses a development key"
        )
    return value


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use 1/0, true/false, yes/no, on/off)")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} must be at least {minimum}")
    return value


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number") from None
    if not math.isfinite(value):  # float() reads "nan" and "inf", and nan < minimum is False
        raise ImproperlyConfigured(f"{name}={raw!r} is not a finite number")
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} must be at least {minimum}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_networks(name: str, default: list[str]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """A comma-separated list of addresses or networks (``10.0.0.5, 10.1.0.0/16, ::1``);
    an address is a network of one. Host bits set in a network (``10.0.0.5/16``) are
    refused: the intended range is ambiguous."""
    networks = []
    for item in env_list(name, default):
        try:
            networks.append(ipaddress.ip_network(item))
        except ValueError as error:
            raise ImproperlyConfigured(f"{name}: {item!r} is not an address or network ({error})") from None
    return networks


LOCKOUT_PARAMETERS = ("ip_address", "username", "user_agent")


def env_lockout_parameters(name: str, default: list[str]) -> list[str | list[str]]:
    """What failed logins are counted against, for django-axes: a comma-separated list
    (``ip_address,username``: each counted apart, either one locks), where ``a+b`` counts
    the pair together (``username+ip_address``)."""
    parameters: list[str | list[str]] = []
    for item in env_list(name, default):
        parts = [part.strip() for part in item.split("+")]
        unknown = [part for part in parts if part not in LOCKOUT_PARAMETERS]
        if unknown or not parts:
            raise ImproperlyConfigured(
                f"{name}: {item!r} is not one of {', '.join(LOCKOUT_PARAMETERS)} or a '+' of them"
            )
        parameters.append(parts[0] if len(parts) == 1 else parts)
    return parameters


def env_prefixed(prefix: str) -> dict[str, str]:
    """Every non-empty variable named ``<prefix><KEY>``, as {KEY: value}."""
    return {name.removeprefix(prefix): value for name, value in os.environ.items() if name.startswith(prefix) and value}


# Runs of one server-bound statement on one connection before it is prepared there.
PREPARE_THRESHOLD = 5


def database_from_url(url: str, *, base_dir: Path) -> dict[str, Any]:
    """Turn ``postgres://user:pass@host:port/name`` or ``sqlite:///path`` into a DATABASES entry.

    Query parameters of a postgres URL become connection options (``?sslmode=require``),
    except ``disable_server_side_cursors=true``, which is for transaction-mode poolers.
    Several hosts, as libpq takes them (``postgres://u@h1:5432,h2:5433/db?target_session_attrs=read-write``),
    become comma-separated HOST and PORT: libpq tries each and keeps the writable one, so a
    new connection finds a new primary after a failover.

    SQLite is opened in WAL mode with IMMEDIATE transactions and a busy timeout, so the
    web server, the worker and the scheduler can share one file without "database is locked".
    """
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in {"postgres", "postgresql", "pgsql"}:
        if not parts.path.strip("/"):
            raise ImproperlyConfigured(f"DATABASE_URL {url!r} names no database")
        options: dict[str, Any] = {key: values[-1] for key, values in parse_qs(parts.query).items()}
        # Behind a transaction-mode pooler (PgBouncer) a server-side cursor can outlive
        # its transaction's server connection: ?disable_server_side_cursors=true.
        pooled = _url_bool(url, "disable_server_side_cursors", options.pop("disable_server_side_cursors", "false"))
        # Parameters are bound on the server (not quoted into the text by the client), and
        # a statement one connection has run five times is prepared there (parsed and
        # planned once); never behind such a pooler, where the next transaction may get
        # another server connection, which has no such statement. ?server_side_binding=false
        # and ?prepare_threshold=N|none override.
        options["server_side_binding"] = _url_bool(
            url, "server_side_binding", options.get("server_side_binding", "true")
        )
        options["prepare_threshold"] = _url_threshold(url, options.pop("prepare_threshold", None), pooled=pooled)
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parts.path.lstrip("/")),
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            **_hosts_and_ports(url, parts.netloc.rpartition("@")[2]),
            "OPTIONS": options,
            "CONN_MAX_AGE": 0,
            "DISABLE_SERVER_SIDE_CURSORS": pooled,
        }
    if scheme == "sqlite":
        # sqlite:///db.sqlite3 is relative to the project; sqlite:////var/db.sqlite3 is absolute.
        path = Path(unquote(parts.path)[1:])
        if not path.is_absolute():
            path = base_dir / path
        path.parent.mkdir(parents=True, exist_ok=True)
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(path),
            "OPTIONS": {
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
            "TEST": {"NAME": str(path.with_name(f"test_{path.name}"))},
        }
    raise ImproperlyConfigured(f"DATABASE_URL {url!r}: unsupported scheme {scheme!r} (use postgres:// or sqlite:///)")


def _hosts_and_ports(url: str, hostlist: str) -> dict[str, str]:
    """HOST and PORT from a URL's ``host[:port][,host[:port]...]`` (``[::1]:5432`` for IPv6):
    each a comma-separated list when there are several hosts, PORT empty when none has one."""
    hosts: list[str] = []
    ports: list[str] = []
    for item in hostlist.split(","):
        host, port = item, ""
        if item.startswith("["):
            host, _, rest = item[1:].partition("]")
            port = rest.removeprefix(":")
        elif ":" in item:
            host, _, port = item.partition(":")
        if port and not (port.isdigit() and 0 < int(port) < 65536):
            raise ImproperlyConfigured(f"DATABASE_URL {url!r}: port {port!r} is not a port number")
        if not host and len(hostlist.split(",")) > 1:
            raise ImproperlyConfigured(f"DATABASE_URL {url!r}: an empty host in its list of hosts")
        hosts.append(unquote(host).lower())
        ports.append(port)
    return {"HOST": ",".join(hosts), "PORT": ",".join(ports) if any(ports) else ""}


def _url_threshold(url: str, raw: str | None, *, pooled: bool) -> int | None:
    """``?prepare_threshold=N`` (``none``: never prepare), else the default for the URL."""
    if raw is None:
        return None if pooled else PREPARE_THRESHOLD
    if raw.strip().lower() == "none":
        return None
    if not raw.strip().isdigit():
        raise ImproperlyConfigured(f"DATABASE_URL {url!r}: prepare_threshold={raw!r} is not a whole number or 'none'")
    return int(raw)


def _url_bool(url: str, name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value not in _TRUE | _FALSE:
        raise ImproperlyConfigured(f"DATABASE_URL {url!r}: {name}={raw!r} is not a boolean")
    return value in _TRUE
