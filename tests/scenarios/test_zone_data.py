"""Two servers with different zone files pay one restaurant across a rule change.

The OS of this machine may carry an older tz database than the pinned ``tzdata``
package (here 2025b against 2026f: British Columbia keeps UTC-7 through the winter of
2026 in the newer one). Before the package was pinned, one server cut the week of 26
October at 2 November 08:00 UTC and the other started the week of 2 November at 07:00;
the overlap guard then skipped that whole week (84 orders, 840.00 never paid).

Here server A runs with ``PYTHONTZPATH`` pointing at the OS's zone files and server B
with it empty, as on an image without them (zoneinfo then reads the package; without
the variable it would read the OS's files too, and the two would not differ): both read
the package, cut the same bounds, record the same tz version, and every order is paid
once.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.scenarios.harness import HANG_GUARD_SECONDS, Scenario
from tests.scenarios.ledger import LEDGER_SEAMS, MISMATCHED_PAYOUTS, UNCOVERED_ORDERS
from tiffin.tz import TZDATA_VERSION

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(HANG_GUARD_SECONDS)]

OS_ZONES = "/usr/share/zoneinfo"
ONBOARDED = datetime(2026, 10, 26, 12, tzinfo=UTC)


def _offset_seen_by_the_os() -> str:
    """Vancouver's offset on 9 Nov 2026 as plain zoneinfo reads it from the OS's files."""
    code = (
        "import zoneinfo, datetime; "
        "print(zoneinfo.ZoneInfo('America/Vancouver').utcoffset(datetime.datetime(2026, 11, 9, 12)))"
    )
    env = {"PYTHONTZPATH": OS_ZONES, "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_servers_with_different_zone_files_cut_the_same_weeks_and_pay_every_order(scenario: Scenario) -> None:
    if not Path(OS_ZONES, "America/Vancouver").exists():
        pytest.skip("this machine has no OS zone files to differ from the package")
    if _offset_seen_by_the_os() == str(timedelta(hours=-7)):
        pytest.skip("the OS's zone data agrees with the package for British Columbia; nothing differs")
    db = scenario.db
    rid = db.scalar(
        "INSERT INTO orders_restaurant (name, timezone, commission_rate, onboarded_at, is_active) "
        "VALUES ('Vancouver Noodles', 'America/Vancouver', 0.15, %s, true) RETURNING id",
        [ONBOARDED],
    )
    # 84 orders in the week of 2 Nov (07:00 UTC to 9 Nov 07:00), 10.00 each, two an hour
    # on weekdays, and some the week before.
    moments = [datetime(2026, 10, 27, 18, tzinfo=UTC) + timedelta(hours=n) for n in range(20)]
    moments += [datetime(2026, 11, 2, 7, 30, tzinfo=UTC) + timedelta(hours=2 * n) for n in range(84)]
    with db.server.connect(db.name) as conn:
        for at in moments:
            conn.execute(
                "INSERT INTO orders_order (restaurant_id, customer_ref, status, total, placed_at, accepted_at, "
                "delivered_at, cancel_reason) VALUES (%s, 'c', 'delivered', 10.00, %s, %s, %s, '')",
                [rid, at - timedelta(minutes=30), at - timedelta(minutes=29), at],
            )
    server_a = scenario.manage(
        "catch_up_payouts", "--as-of", "2026-11-02T12:00:00+00:00", env={"PYTHONTZPATH": OS_ZONES}
    )
    assert server_a.returncode == 0, server_a.stderr
    server_b = scenario.manage("catch_up_payouts", "--as-of", "2026-11-09T12:00:00+00:00", env={"PYTHONTZPATH": ""})
    assert server_b.returncode == 0, server_b.stderr

    payouts = db.rows(
        "SELECT period_start, period_end, order_count, gross, tzdata_version FROM payouts_payout ORDER BY period_start"
    )
    assert [row[:4] for row in payouts] == [
        (datetime(2026, 10, 26, 7, tzinfo=UTC), datetime(2026, 11, 2, 7, tzinfo=UTC), 20, 200),
        (datetime(2026, 11, 2, 7, tzinfo=UTC), datetime(2026, 11, 9, 7, tzinfo=UTC), 84, 840),
    ]
    assert {row[4] for row in payouts} == {TZDATA_VERSION}
    assert db.rows(LEDGER_SEAMS) == [] and db.rows(UNCOVERED_ORDERS) == [] and db.rows(MISMATCHED_PAYOUTS) == []
