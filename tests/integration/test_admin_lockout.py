"""The admin login locks out a client after LOGIN_FAILURE_LIMIT wrong passwords: the
right password is then refused (429) without being hashed, until the cool-off has passed;
the lockout is alerted once (a log line in the request; the admin mail and the webhook by
a worker, through django-q2's queue). Posted to the real admin login through Django's test
client, counted in the real database."""

from __future__ import annotations

import ipaddress
import json
from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils.module_loading import import_string
from django_q.models import OrmQ
from django_q.signing import SignedPackage
from prometheus_client.parser import text_string_to_metric_families

from operations.alerts import LOCKOUT_DELIVER_TASK
from tests.engine import T0
from tests.hashers import CountingPBKDF2PasswordHasher
from tests.integration.test_monitoring_alerts import CaptureServer, http_server  # noqa: F401  (a fixture)
from tests.smtp_sink import running_smtp_server

pytestmark = [pytest.mark.django_db, pytest.mark.filterwarnings("ignore:No directory at:UserWarning")]

LOGIN = reverse("admin:login")
PASSWORD = "a long and right passphrase"
LIMIT = 5
COOL_OFF = timedelta(minutes=15)


@pytest.fixture(autouse=True)
def _login_settings(admin_pages, settings, http_server: CaptureServer):  # noqa: F811
    settings.PASSWORD_HASHERS = ["tests.hashers.CountingPBKDF2PasswordHasher"]
    settings.ADMINS = [("Ops", "ops@example.com")]
    settings.SCHEDULER_WEBHOOK_URL = f"{http_server.url}/hooks/lockouts"
    # The shipped defaults, stated so the test says what it checks.
    settings.AXES_FAILURE_LIMIT = LIMIT
    settings.AXES_COOLOFF_TIME = COOL_OFF
    settings.AXES_LOCKOUT_PARAMETERS = ["ip_address", "username"]
    User.objects.create_superuser("ops", "ops@example.com", PASSWORD)


def _post(password: str, *, username: str = "ops", address: str = "198.51.100.7", forwarded_for: str = ""):
    """One login attempt from a new client (no session) at ``address``."""
    data = {"username": username, "password": password, "next": "/admin/"}
    if forwarded_for:
        return Client().post(LOGIN, data, REMOTE_ADDR=address, HTTP_X_FORWARDED_FOR=forwarded_for)
    return Client().post(LOGIN, data, REMOTE_ADDR=address)


def _logged_in(response) -> bool:
    return response.status_code == 302 and response["Location"] == "/admin/"


def _lockout_tasks_run() -> int:
    """Run the queued lockout alerts as a django-q2 worker does (unsign the package, import
    its function, call it with its arguments), here, then take them off the queue; return
    how many ran. (django-q2's own worker function closes the test's database connection.)"""
    ran = 0
    for entry in OrmQ.objects.order_by("id"):
        task = SignedPackage.loads(entry.payload)
        if task["func"] == LOCKOUT_DELIVER_TASK:
            import_string(task["func"])(*task["args"], **task["kwargs"])
            entry.delete()
            ran += 1
    return ran


def _lockout_lines(caplog) -> list[dict[str, object]]:
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "operations.alerts"]
    return [line for line in lines if line.get("event") == "login_lockout"]


def test_the_right_password_is_refused_after_the_limit_and_no_password_is_hashed(caplog, mailoutbox, http_server):  # noqa: F811
    before = CountingPBKDF2PasswordHasher.hashed
    with time_machine.travel(T0, tick=False), caplog.at_level("WARNING"):
        codes = [_post(f"guess-{n}").status_code for n in range(LIMIT)]
        hashed = CountingPBKDF2PasswordHasher.hashed
        assert hashed - before == LIMIT  # each counted failure hashed its guess
        refused = [_post(PASSWORD), _post("another guess"), _post(PASSWORD)]
    # Four wrong answers show the form again; the fifth locks the client out.
    assert codes == [200] * (LIMIT - 1) + [429]
    assert [r.status_code for r in refused] == [429, 429, 429]
    assert not any(_logged_in(r) for r in refused)
    assert "too many login attempts" in refused[0].content.decode()
    assert CountingPBKDF2PasswordHasher.hashed == hashed  # refused before any hashing
    # One alert for the lockout, none for the attempts it refused.
    [line] = _lockout_lines(caplog)
    assert (line["username"], line["ip_address"], line["failures"]) == ("ops", "198.51.100.7", LIMIT)
    assert line["locked_until"] == (T0 + COOL_OFF).isoformat()
    # The request mailed and posted nothing: a worker does, from the queue.
    assert mailoutbox == [] and http_server.requests == []
    assert _lockout_tasks_run() == 1
    [mail] = mailoutbox
    assert mail.to == ["ops@example.com"] and "locked out: 'ops' from 198.51.100.7" in mail.subject
    [hook] = http_server.requests
    assert hook.path == "/hooks/lockouts" and json.loads(hook.body)["event"] == "login_lockout"


def test_the_right_password_works_again_once_the_cool_off_has_passed(caplog):
    with time_machine.travel(T0, tick=False):
        for n in range(LIMIT):
            _post(f"guess-{n}")
    with time_machine.travel(T0 + COOL_OFF - timedelta(seconds=1), tick=False):
        assert _post(PASSWORD).status_code == 429  # refused attempts do not extend it, nor end it early
    with time_machine.travel(T0 + COOL_OFF + timedelta(seconds=1), tick=False):
        assert _logged_in(_post(PASSWORD))


def test_many_clients_guessing_one_username_lock_the_username_from_every_address():
    addresses = ["203.0.113.1", "203.0.113.2", "203.0.113.3", "203.0.113.4"]
    with time_machine.travel(T0, tick=False):
        codes = [_post(f"guess-{n}", address=addresses[n % 4]).status_code for n in range(LIMIT)]
        assert codes[-1] == 429
        assert _post(PASSWORD, address="192.0.2.200").status_code == 429  # a fifth address, the right password
        # Another account from an address that never failed is not held up.
        User.objects.create_superuser("other", "other@example.com", PASSWORD)
        assert _logged_in(_post(PASSWORD, username="other", address="192.0.2.201"))


def test_one_address_guessing_many_usernames_is_locked_out_for_every_username():
    with time_machine.travel(T0, tick=False):
        codes = [_post("guess", username=f"user{n}").status_code for n in range(LIMIT)]
        assert codes[-1] == 429
        assert _post(PASSWORD).status_code == 429  # the same address, a real account


def test_logging_in_to_an_account_of_ones_own_does_not_reset_the_guesses():
    User.objects.create_user("guesser", password=PASSWORD, is_staff=True)
    with time_machine.travel(T0, tick=False):
        codes = [_post(f"guess-{n}").status_code for n in range(LIMIT - 1)]
        assert _logged_in(_post(PASSWORD, username="guesser"))  # the same address
        codes.append(_post("one more guess").status_code)
    assert codes == [200] * (LIMIT - 1) + [429]


def test_behind_a_trusted_proxy_the_lockout_holds_the_client_not_the_proxy(settings):
    settings.TRUSTED_PROXIES = [ipaddress.ip_network("10.0.0.0/8")]
    settings.AXES_LOCKOUT_PARAMETERS = ["ip_address"]
    via_proxy = {"address": "10.0.0.2"}
    with time_machine.travel(T0, tick=False):
        for n in range(LIMIT):
            _post(f"guess-{n}", forwarded_for="198.51.100.66", **via_proxy)
        assert _post(PASSWORD, forwarded_for="198.51.100.66", **via_proxy).status_code == 429
        # Another visitor through the same proxy logs in.
        assert _logged_in(_post(PASSWORD, forwarded_for="198.51.100.67", **via_proxy))


def _lockouts_scraped(client: Client) -> float:
    response = client.get("/metrics")
    assert response.status_code == 200
    families = text_string_to_metric_families(response.content.decode())
    [value] = [s.value for f in families for s in f.samples if s.name == "tiffin_login_lockouts_total"]
    return float(value)


def test_each_lockout_is_counted_once_for_prometheus(settings, client):
    settings.METRICS_ENABLED, settings.METRICS_BEARER_TOKEN, settings.METRICS_MULTIPROC_DIR = True, "", ""
    before = _lockouts_scraped(client)
    with time_machine.travel(T0, tick=False):
        for n in range(LIMIT + 3):  # the lockout, then three refused attempts
            _post(f"guess-{n}")
        _post("guess", address="203.0.113.77", username="someone")  # one failure elsewhere: no lockout
    assert _lockouts_scraped(client) == before + 1


def test_the_lockout_mail_goes_out_through_a_worker_never_the_login_request(settings, tmp_path, http_server):  # noqa: F811
    """Against a real SMTP server: the request that locks the client out returns with no
    message at the server (a mail sent inside it is on the server before the response, as
    the server records a message before answering its DATA); the queued task then mails it."""
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    with running_smtp_server(directory=tmp_path / "smtp") as smtp:
        settings.EMAIL_HOST, settings.EMAIL_PORT = smtp.host, smtp.port
        with time_machine.travel(T0, tick=False):
            codes = [_post(f"guess-{n}").status_code for n in range(LIMIT)]
        assert codes[-1] == 429
        assert smtp.messages() == [] and http_server.requests == []
        assert _lockout_tasks_run() == 1
        [mail] = smtp.messages()
    assert mail["To"] == "ops@example.com" and "locked out: 'ops' from 198.51.100.7" in mail["Subject"]
    [hook] = http_server.requests
    assert json.loads(hook.body)["username"] == "ops"
