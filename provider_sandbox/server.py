"""The sandbox's HTTP server, its SQLite state and its faults (see the package docstring).

Every ``/v1`` request goes through ``Handler.handle_api``: the global latency, then the
fault chosen for it (the ``Sandbox-Fault`` header, else the armed fault of
``POST /_sandbox/faults``), then the API itself. Faults that act before the API
(``down``, ``drop``, ``500-before-commit``) leave no trace in the state; ``slow`` makes
the work itself last (a POST holds its idempotency key all the while); the
``commit-then-*`` faults run the request to its end, its response stored under its key,
and then lose the answer, as a network or a proxy does after the provider committed.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import re
import secrets
import signal
import sqlite3
import string
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from enum import StrEnum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import parse_qsl, urlsplit


class FaultMode(StrEnum):
    """What an injected fault does to one API request (docs/provider-sandbox.md)."""

    COMMIT_THEN_TIMEOUT = "commit-then-timeout"  # executes, then holds the connection and closes it unanswered
    COMMIT_THEN_500 = "commit-then-500"  # executes, then answers 500
    FAIL_BEFORE_COMMIT = "500-before-commit"  # answers 500 without executing
    DROP = "drop"  # closes the connection unanswered without executing
    SLOW = "slow"  # executes taking delay_ms longer, holding its key
    DOWN = "down"  # answers 503 without executing


FAULT_MODES = ", ".join(FaultMode)
# How long a fault holds a request when it is not told (commit-then-timeout: longer than
# any client timeout a test sets).
DEFAULT_DELAY_MS = {FaultMode.COMMIT_THEN_TIMEOUT: 30_000, FaultMode.SLOW: 1_000}
DESTINATION = re.compile(r"^acct_[A-Za-z0-9]+$")
CURRENCY = re.compile(r"^[a-zA-Z]{3}$")
# The most one transfer can carry: Stripe takes an amount of at most eight digits in the
# currency's smallest unit, and answers a larger one 400 amount_too_large.
MAX_AMOUNT = 99_999_999
CREATE_PARAMS = {"amount", "currency", "destination", "transfer_group", "description", "source_transaction"}
# "created[]": created[gt], [gte], [lt] and [lte] (Stripe's range filter).
LIST_PARAMS = {"limit", "starting_after", "ending_before", "destination", "transfer_group", "created", "created[]"}
CREATED_BOUNDS = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}

SCHEMA = """
CREATE TABLE IF NOT EXISTS transfers (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    created INTEGER NOT NULL,
    amount INTEGER NOT NULL,
    destination TEXT NOT NULL,
    transfer_group TEXT,
    object TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS idempotency_keys (
    key TEXT PRIMARY KEY,
    path TEXT NOT NULL,
    params TEXT NOT NULL,
    status INTEGER NOT NULL,
    response TEXT NOT NULL,
    request_id TEXT NOT NULL,
    stored_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS idempotency_keys_stored_at ON idempotency_keys (stored_at);
CREATE TABLE IF NOT EXISTS clock (id INTEGER PRIMARY KEY CHECK (id = 1), offset_seconds REAL NOT NULL);
"""


class ApiError(Exception):
    """An answer in Stripe's error format: ``{"error": {"type", "message", "code", "param"}}``."""

    def __init__(
        self, status: int, message: str, *, type: str = "invalid_request_error", code: str = "", param: str = ""
    ) -> None:
        super().__init__(message)
        self.status = status
        error: dict[str, str] = {"type": type, "message": message}
        if code:
            error["code"] = code
        if param:
            error["param"] = param
        self.body = {"error": error}


@dataclass
class Fault:
    """A fault armed through ``POST /_sandbox/faults``: for the next ``remaining`` API
    requests (None: until cleared) whose method is in ``methods`` (empty: any)."""

    mode: FaultMode
    delay_ms: int
    remaining: int | None
    methods: tuple[str, ...]

    def describe(self) -> dict[str, Any]:
        return {"mode": self.mode, "delay_ms": self.delay_ms, "count": self.remaining, "methods": list(self.methods)}


def _random_id(prefix: str) -> str:
    return prefix + "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(24))


class Store:
    """Transfers and idempotency keys in one SQLite file. One connection behind one lock:
    each request's writes are one transaction, synced to disk when it commits."""

    def __init__(self, path: Path, *, key_retention: float) -> None:
        self.key_retention = key_retention
        self.lock = threading.Lock()
        self.in_flight: set[str] = set()
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(SCHEMA)
        self.db.execute("INSERT OR IGNORE INTO clock (id, offset_seconds) VALUES (1, 0)")
        self.offset = float(self.db.execute("SELECT offset_seconds FROM clock").fetchone()[0])

    def now(self) -> float:
        """The sandbox's clock: real time plus the offset ``POST /_sandbox/clock`` added."""
        return time.time() + self.offset

    def advance_clock(self, seconds: float) -> None:
        with self.lock:
            self.offset += seconds
            self.db.execute("UPDATE clock SET offset_seconds = ?", (self.offset,))

    def claim_key(self, key: str, *, path: str, params: str) -> tuple[int, dict[str, Any], str] | None:
        """The stored (status, body, request id) to replay for ``key``; or None, the key now marked in
        flight until ``release_key``. Raises 409 while another request holds the key and 400
        when it was used with other parameters or on another endpoint."""
        with self.lock:
            if key in self.in_flight:
                raise ApiError(
                    409,
                    "There is currently another in-progress request using this idempotency key "
                    f"('{key}'). Retry the request once it has finished.",
                    type="idempotency_error",
                    code="idempotency_key_in_use",
                )
            row = self.db.execute(
                "SELECT path, params, status, response, request_id FROM idempotency_keys "
                "WHERE key = ? AND stored_at >= ?",
                (key, self.now() - self.key_retention),
            ).fetchone()
            if row is None:
                self.in_flight.add(key)
                return None
        stored_path, stored_params, status, response, request_id = row
        if stored_path != path:
            raise ApiError(
                400,
                "Keys for idempotent requests can only be used for the same endpoint they were first used for "
                f"('{stored_path}' vs '{path}'). Try using a key other than '{key}' if you meant to execute a "
                "different request.",
                type="idempotency_error",
            )
        if stored_params != params:
            raise ApiError(
                400,
                "Keys for idempotent requests can only be used with the same parameters they were first used with. "
                f"Try using a key other than '{key}' if you meant to execute a different request.",
                type="idempotency_error",
            )
        return int(status), json.loads(response), str(request_id)

    def release_key(self, key: str) -> None:
        with self.lock:
            self.in_flight.discard(key)

    def create_transfer(
        self, transfer: dict[str, Any], *, key: str | None, path: str, params: str, request_id: str
    ) -> dict[str, Any]:
        """Insert ``transfer`` (its id and time given here) and the response stored under
        ``key``, in one transaction."""
        with self.lock:
            transfer = {**transfer, "id": _random_id("tr_"), "created": int(self.now())}
            transfer["reversals"]["url"] = f"/v1/transfers/{transfer['id']}/reversals"
            body = json.dumps(transfer)
            self.db.execute("BEGIN IMMEDIATE")
            try:
                self.db.execute(
                    "INSERT INTO transfers (id, created, amount, destination, transfer_group, object) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        transfer["id"],
                        transfer["created"],
                        transfer["amount"],
                        transfer["destination"],
                        transfer["transfer_group"],
                        body,
                    ),
                )
                if key is not None:  # an expired key is forgotten here, and a reused one replaced
                    now = self.now()
                    self.db.execute("DELETE FROM idempotency_keys WHERE stored_at < ?", (now - self.key_retention,))
                    self.db.execute(
                        "INSERT OR REPLACE INTO idempotency_keys "
                        "(key, path, params, status, response, request_id, stored_at) VALUES (?, ?, ?, 200, ?, ?, ?)",
                        (key, path, params, body, request_id, now),
                    )
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
        return transfer

    def transfer(self, transfer_id: str) -> dict[str, Any]:
        with self.lock:
            row = self.db.execute("SELECT object FROM transfers WHERE id = ?", (transfer_id,)).fetchone()
        if row is None:
            raise ApiError(404, f"No such transfer: '{transfer_id}'", code="resource_missing", param="id")
        return dict(json.loads(row[0]))

    def transfers(self, query: dict[str, str]) -> dict[str, Any]:
        """One page of Stripe's list: newest first, ``limit`` (1 to 100, default 10) after
        the ``starting_after`` or before the ``ending_before`` cursor, with the filters."""
        limit = _integer(query.get("limit", "10"), param="limit")
        if not 1 <= limit <= 100:
            raise ApiError(
                400, "This value must be between 1 and 100.", code="parameter_invalid_integer", param="limit"
            )
        where: list[str] = ["1 = 1"]
        args: list[str | int] = []
        for name in ("destination", "transfer_group"):
            if name in query:
                where.append(f"{name} = ?")
                args.append(query[name])
        if "created" in query:
            where.append("created = ?")
            args.append(_integer(query["created"], param="created"))
        for bound, operator in CREATED_BOUNDS.items():
            if f"created[{bound}]" in query:
                where.append(f"created {operator} ?")
                args.append(_integer(query[f"created[{bound}]"], param=f"created[{bound}]"))
        with self.lock:
            backwards = "ending_before" in query
            cursor_name = "ending_before" if backwards else "starting_after"
            if cursor_name in query:
                cursor = self.db.execute("SELECT seq FROM transfers WHERE id = ?", (query[cursor_name],)).fetchone()
                if cursor is None:
                    raise ApiError(
                        400, f"No such transfer: '{query[cursor_name]}'", code="resource_missing", param=cursor_name
                    )
                where.append("seq > ?" if backwards else "seq < ?")
                args.append(cursor[0])
            order = "ASC" if backwards else "DESC"
            rows = self.db.execute(
                f"SELECT object FROM transfers WHERE {' AND '.join(where)} ORDER BY seq {order} LIMIT ?",
                (*args, limit + 1),
            ).fetchall()
        page = [json.loads(row[0]) for row in rows[:limit]]
        if backwards:
            page.reverse()
        return {"object": "list", "data": page, "has_more": len(rows) > limit, "url": "/v1/transfers"}

    def state(self) -> dict[str, Any]:
        with self.lock:
            count, total = self.db.execute("SELECT count(*), coalesce(sum(amount), 0) FROM transfers").fetchone()
            keys = self.db.execute(
                "SELECT count(*) FROM idempotency_keys WHERE stored_at >= ?", (self.now() - self.key_retention,)
            ).fetchone()[0]
            return {
                "transfers": count,
                "amount_total": total,
                "idempotency_keys": keys,
                "in_flight": len(self.in_flight),
                "clock": self.now(),
                "clock_offset_seconds": self.offset,
                "key_retention_seconds": self.key_retention,
            }


def _integer(value: str, *, param: str) -> int:
    if not re.fullmatch(r"-?\d+", value):
        raise ApiError(400, f"Invalid integer: {value}", code="parameter_invalid_integer", param=param)
    return int(value)


def _split_params(pairs: list[tuple[str, str]], *, allowed: set[str]) -> tuple[dict[str, str], dict[str, str]]:
    """Form pairs as (plain parameters, ``metadata[...]`` entries); 400 for any other name.
    ``expand[...]`` is accepted and ignored: a transfer has nothing here to expand."""
    plain: dict[str, str] = {}
    metadata: dict[str, str] = {}
    for name, value in pairs:
        bracket = re.fullmatch(r"(\w+)\[(.*)\]", name)
        if bracket and bracket[1] == "metadata":
            metadata[bracket[2]] = value
        elif bracket and bracket[1] == "expand":
            continue
        elif name in allowed or (bracket and f"{bracket[1]}[]" in allowed and bracket[2] in CREATED_BOUNDS):
            plain[name] = value
        else:
            raise ApiError(400, f"Received unknown parameter: {name}", code="parameter_unknown", param=name)
    return plain, metadata


def new_transfer(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """The transfer ``POST /v1/transfers`` asks for, validated as Stripe does (without id and time)."""
    params, metadata = _split_params(pairs, allowed=CREATE_PARAMS)
    for name in ("amount", "currency", "destination"):
        if not params.get(name):
            raise ApiError(400, f"Missing required param: {name}.", code="parameter_missing", param=name)
    amount = _integer(params["amount"], param="amount")
    if amount < 1:
        raise ApiError(400, "This value must be greater than or equal to 1.", code="parameter_invalid_integer",
                       param="amount")  # fmt: skip
    if amount > MAX_AMOUNT:
        raise ApiError(400, "Amount must be no more than 99999999 in the currency's smallest unit "
                       "(999,999.99 in a two-decimal currency).", code="amount_too_large",
                       param="amount")  # fmt: skip
    if not CURRENCY.fullmatch(params["currency"]):
        raise ApiError(400, f"Invalid currency: {params['currency']}.", code="parameter_invalid_string",
                       param="currency")  # fmt: skip
    if not DESTINATION.fullmatch(params["destination"]):
        raise ApiError(400, f"No such destination: '{params['destination']}'", code="resource_missing",
                       param="destination")  # fmt: skip
    if len(metadata) > 50 or any(len(k) > 40 or len(v) > 500 for k, v in metadata.items()):
        raise ApiError(400, "Metadata has at most 50 keys of 40 characters and values of 500.",
                       code="parameter_invalid_string", param="metadata")  # fmt: skip
    return {
        "object": "transfer",
        "amount": amount,
        "amount_reversed": 0,
        "balance_transaction": _random_id("txn_"),
        "currency": params["currency"].lower(),
        "description": params.get("description") or None,
        "destination": params["destination"],
        "destination_payment": _random_id("py_"),
        "livemode": False,
        "metadata": {k: v for k, v in metadata.items() if v != ""},
        "reversals": {"object": "list", "data": [], "has_more": False, "total_count": 0, "url": ""},
        "reversed": False,
        "source_transaction": params.get("source_transaction") or None,
        "source_type": "card",
        "transfer_group": params.get("transfer_group") or None,
    }


class Sandbox(ThreadingHTTPServer):
    """The server: the store, the armed faults and the global latency, shared by the handlers."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], *, store: Store, latency_ms: int, log_requests: bool) -> None:
        super().__init__(address, Handler)
        self.store = store
        self.latency_ms = latency_ms
        self.log_requests = log_requests
        # The armed faults, in turn: the first acts until its count is spent, then the next.
        self.faults: list[Fault] = []
        self.fault_lock = threading.Lock()

    def take_fault(self, method: str) -> tuple[FaultMode, int] | None:
        """The first armed fault's (mode, delay) for this request, counting it down."""
        with self.fault_lock:
            fault = self.faults[0] if self.faults else None
            if fault is None or (fault.methods and method not in fault.methods):
                return None
            if fault.remaining is not None:
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self.faults.pop(0)
            return fault.mode, fault.delay_ms


class Handler(BaseHTTPRequestHandler):
    server: Sandbox
    protocol_version = "HTTP/1.1"  # keep-alive, as Stripe's clients expect
    # Headers and body go out in two writes: with Nagle's algorithm the body would wait
    # for the client's delayed ACK (40 ms on Linux) on a kept-alive connection.
    disable_nagle_algorithm = True
    request_id: str  # this request's Request-Id, stored with the response its key replays

    def do_GET(self) -> None:
        self.route("GET")

    def do_POST(self) -> None:
        self.route("POST")

    def do_DELETE(self) -> None:
        self.route("DELETE")

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.log_requests:
            super().log_message(format, *args)

    def route(self, method: str) -> None:
        """Answer one request; an unexpected exception is a 500 ``api_error``, its traceback on stderr."""
        self.request_id = _random_id("req_")
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode() if length else ""
        try:
            if url.path.startswith("/_sandbox/"):
                self.send_json(200, self.handle_control(method, url.path, body))
            elif url.path.startswith("/v1/"):
                self.handle_api(method, url.path, url.query, body)
            else:
                raise ApiError(404, f"Unrecognized request URL ({method}: {url.path}).")
        except ApiError as error:
            self.send_json(error.status, error.body)
        except Exception:
            traceback.print_exc()
            self.send_json(500, ApiError(500, "An unexpected error occurred.", type="api_error").body)

    def handle_control(self, method: str, path: str, body: str) -> dict[str, Any]:
        """``GET /_sandbox/state``, ``POST``/``DELETE /_sandbox/faults``, ``POST /_sandbox/clock``."""
        server = self.server
        if (method, path) == ("GET", "/_sandbox/state"):
            with server.fault_lock:
                armed = [fault.describe() for fault in server.faults]
            return {**server.store.state(), "fault": armed[0] if armed else None, "faults": armed,
                    "latency_ms": server.latency_ms}  # fmt: skip
        if (method, path) == ("DELETE", "/_sandbox/faults"):
            with server.fault_lock:
                server.faults = []
            return {"fault": None}
        try:
            payload = json.loads(body or "{}")
            if not isinstance(payload, dict):
                raise ValueError("the body must be a JSON object")
        except ValueError as error:
            raise ApiError(400, f"Invalid JSON body: {error}") from None
        if (method, path) == ("POST", "/_sandbox/faults"):
            fault = parse_fault(payload)
            then = payload.get("then", False)
            if not isinstance(then, bool):
                raise ApiError(400, "then must be true (after the armed faults) or false (instead of them).")
            with server.fault_lock:
                server.faults = [*(server.faults if then else []), *([fault] if fault else [])]
                armed = [queued.describe() for queued in server.faults]
            return {"fault": armed[0] if armed else None, "faults": armed}
        if (method, path) == ("POST", "/_sandbox/clock"):
            seconds = payload.get("advance_seconds")
            if not isinstance(seconds, int | float) or isinstance(seconds, bool) or seconds < 0:
                raise ApiError(400, "advance_seconds must be a number >= 0 (the clock only moves forward).")
            server.store.advance_clock(float(seconds))
            return {"clock": server.store.now(), "clock_offset_seconds": server.store.offset}
        raise ApiError(404, f"Unrecognized request URL ({method}: {path}).")

    def handle_api(self, method: str, path: str, query: str, body: str) -> None:
        if self.server.latency_ms:
            time.sleep(self.server.latency_ms / 1000)
        mode, delay_ms = self.header_fault() or self.server.take_fault(method) or (None, 0)
        if mode == FaultMode.DOWN:
            raise ApiError(503, "The provider is unavailable (sandbox fault: down).", type="api_error")
        if mode == FaultMode.DROP:
            self.close_connection = True  # no answer at all; the client sees the connection close
            return
        if mode == FaultMode.FAIL_BEFORE_COMMIT:
            raise ApiError(500, "An error occurred with our connection to Stripe (sandbox fault).", type="api_error")
        work_ms = delay_ms if mode == FaultMode.SLOW else 0
        status, answer, headers = self.api(method, path, query, body, work_ms=work_ms)
        if mode == FaultMode.COMMIT_THEN_500:
            raise ApiError(500, "An error occurred after the request was executed (sandbox fault).", type="api_error")
        if mode == FaultMode.COMMIT_THEN_TIMEOUT:
            time.sleep(delay_ms / 1000)
            self.close_connection = True
            return
        self.send_json(status, answer, headers)

    def header_fault(self) -> tuple[FaultMode, int] | None:
        """The fault the request's ``Sandbox-Fault`` (and ``Sandbox-Fault-Delay-Ms``) header asks for."""
        name = self.headers.get("Sandbox-Fault")
        if not name:
            return None
        if name not in set(FaultMode):
            raise ApiError(400, f"Unknown Sandbox-Fault {name!r}; one of {FAULT_MODES}.")
        mode = FaultMode(name)
        delay = self.headers.get("Sandbox-Fault-Delay-Ms")
        if delay is not None and not delay.isdigit():
            raise ApiError(400, f"Sandbox-Fault-Delay-Ms must be a whole number of milliseconds, not {delay!r}.")
        return mode, int(delay) if delay is not None else DEFAULT_DELAY_MS.get(mode, 0)

    def api(
        self, method: str, path: str, query: str, body: str, *, work_ms: int
    ) -> tuple[int, dict[str, Any], dict[str, str]]:
        """Authenticate, then run one Stripe endpoint: (status, body, extra headers). The
        work takes ``work_ms`` (a slow answer), a POST holding its key all the while."""
        authorization = self.headers.get("Authorization", "")
        if not authorization.startswith("Bearer "):
            raise ApiError(401, "You did not provide an API key. Provide it in the Authorization header.")
        if not authorization.removeprefix("Bearer ").startswith("sk_test_"):
            raise ApiError(401, "Invalid API Key provided: this sandbox takes only test keys (sk_test_...).")
        store = self.server.store
        if method == "GET":
            time.sleep(work_ms / 1000)
            if path == "/v1/transfers":
                plain, _ = _split_params(parse_qsl(query, keep_blank_values=True), allowed=LIST_PARAMS)
                return 200, store.transfers(plain), {}
            if re.fullmatch(r"/v1/transfers/[^/]+", path):
                return 200, store.transfer(path.rsplit("/", 1)[1]), {}
            raise ApiError(404, f"Unrecognized request URL ({method}: {path}).")
        if method != "POST":
            raise ApiError(404, f"Unrecognized request URL ({method}: {path}).")
        # A POST: its key is looked at before the endpoint, as a layer in front of them all.
        pairs = parse_qsl(body, keep_blank_values=True)
        params = json.dumps(sorted(pairs))
        key = self.headers.get("Idempotency-Key") or None
        if key is not None and len(key) > 255:
            raise ApiError(400, "Idempotency-Key must be at most 255 characters long.", param="Idempotency-Key")
        if key is not None:
            stored = store.claim_key(key, path=path, params=params)
            if stored is not None:
                status, answer, original_request = stored
                return status, answer, {"Idempotency-Key": key, "Idempotent-Replayed": "true",
                                        "Original-Request": original_request}  # fmt: skip
        try:
            time.sleep(work_ms / 1000)
            if path != "/v1/transfers":
                raise ApiError(404, f"Unrecognized request URL ({method}: {path}).")
            transfer = store.create_transfer(
                new_transfer(pairs), key=key, path=path, params=params, request_id=self.request_id
            )
        finally:
            if key is not None:
                store.release_key(key)
        return 200, transfer, {"Idempotency-Key": key} if key is not None else {}

    def send_json(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Request-Id", self.request_id)
        if version := self.headers.get("Stripe-Version"):
            self.send_header("Stripe-Version", version)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


def parse_fault(payload: dict[str, Any]) -> Fault | None:
    """The fault ``POST /_sandbox/faults`` arms; None for ``{"mode": null}`` or ``"none"``."""
    name = payload.get("mode")
    if name in (None, "none"):
        return None
    if name not in set(FaultMode):
        raise ApiError(400, f"Unknown fault mode {name!r}; one of {FAULT_MODES} (or none).")
    mode = FaultMode(name)
    count = payload.get("count")
    if count is not None and (not isinstance(count, int) or isinstance(count, bool) or count < 1):
        raise ApiError(400, "count must be a whole number >= 1, or null (until cleared).")
    delay_ms = payload.get("delay_ms", DEFAULT_DELAY_MS.get(mode, 0))
    if not isinstance(delay_ms, int) or isinstance(delay_ms, bool) or delay_ms < 0:
        raise ApiError(400, "delay_ms must be a whole number >= 0.")
    methods = payload.get("methods") or []
    if not isinstance(methods, list) or not set(methods) <= {"GET", "POST"}:
        raise ApiError(400, 'methods must be a list of "GET" and "POST".')
    return Fault(mode=mode, delay_ms=delay_ms, remaining=count, methods=tuple(methods))


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m provider_sandbox", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True, help="port to listen on; 0 picks a free one")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--state", type=Path, required=True, help="SQLite file with the transfers and keys")
    parser.add_argument("--key-retention", type=float, default=86_400.0, help="seconds a key is kept (86400)")
    parser.add_argument("--latency-ms", type=int, default=0, help="added to every API request (0)")
    parser.add_argument("--log-requests", action="store_true", help="log each request on stderr")
    arguments = parser.parse_args(argv)
    if not 0 <= arguments.port <= 65535:
        parser.error(f"--port must be between 0 and 65535, not {arguments.port}")
    if arguments.key_retention <= 0:
        parser.error(f"--key-retention must be positive, not {arguments.key_retention:g}")
    if arguments.latency_ms < 0:
        parser.error(f"--latency-ms must be >= 0, not {arguments.latency_ms}")
    if not arguments.state.parent.is_dir():
        parser.error(f"--state: the directory {arguments.state.parent} does not exist")
    return arguments


def main(argv: list[str] | None = None, *, out: TextIO = sys.stdout) -> int:
    """Serve until SIGTERM or Ctrl-C. The first line on ``out`` is ``listening on URL``."""
    arguments = parse_arguments(argv)
    lock = Path(f"{arguments.state}.lock").open("w")  # noqa: SIM115  # held for the process's life
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"another sandbox is serving {arguments.state}", file=sys.stderr)
        return 2
    store = Store(arguments.state, key_retention=arguments.key_retention)
    server = Sandbox(
        (arguments.host, arguments.port),
        store=store,
        latency_ms=arguments.latency_ms,
        log_requests=arguments.log_requests,
    )
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    print(f"listening on http://{arguments.host}:{server.server_address[1]}", file=out, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        with store.lock:  # not under a request's transaction
            store.db.close()
    return 0
