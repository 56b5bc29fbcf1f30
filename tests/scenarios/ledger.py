"""What the payout ledger must look like, computed independently of the payout code:
each restaurant's business weeks from its onboarding to the run's logical time, each
payout's amounts from the orders delivered inside its bounds at the rate in force, and
the ledger's seams (contiguous, every delivered order inside it covered once)."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

from tests.scenarios.harness import ScenarioDatabase

SETTLEMENT_DELAY = timedelta(seconds=1800)  # PAYOUT_SETTLEMENT_DELAY_SECONDS

# Payouts whose amounts disagree with their orders: gross and count are the delivered
# orders inside [period_start, period_end); the rate is the restaurant's latest rate
# change at or before period_start, else its onboarding rate; commission is gross x rate
# rounded half-up to cents (PostgreSQL's round(numeric) rounds half away from zero); net
# the rest.
MISMATCHED_PAYOUTS = """
SELECT p.id, p.restaurant_id, p.period_start, p.gross, s.gross, p.order_count, s.n
FROM payouts_payout p
JOIN orders_restaurant r ON r.id = p.restaurant_id
CROSS JOIN LATERAL (
    SELECT coalesce(sum(o.total), 0) AS gross, count(*) AS n FROM orders_order o
    WHERE o.restaurant_id = p.restaurant_id AND o.status = 'delivered'
      AND o.delivered_at >= p.period_start AND o.delivered_at < p.period_end
) s
CROSS JOIN LATERAL (
    SELECT coalesce((SELECT c.rate FROM orders_commissionratechange c
                     WHERE c.restaurant_id = p.restaurant_id AND c.effective_from <= p.period_start
                     ORDER BY c.effective_from DESC LIMIT 1), r.commission_rate) AS rate
) rate
WHERE p.gross <> s.gross OR p.order_count <> s.n OR p.commission_rate <> rate.rate
   OR p.commission <> round(s.gross * rate.rate, 2) OR p.net <> p.gross - p.commission
"""

# Seams of the ledger: a payout that does not start where its restaurant's previous one
# ended (a gap or an overlap), and delivered orders before the last payout's end that no
# payout covers.
LEDGER_SEAMS = """
SELECT restaurant_id, previous_end, period_start FROM (
    SELECT restaurant_id, period_start,
           lag(period_end) OVER (PARTITION BY restaurant_id ORDER BY period_start) AS previous_end
    FROM payouts_payout
) seams
WHERE previous_end IS NOT NULL AND previous_end <> period_start
"""
UNCOVERED_ORDERS = """
SELECT o.id FROM orders_order o
WHERE o.status = 'delivered'
  AND o.delivered_at < (SELECT max(p.period_end) FROM payouts_payout p WHERE p.restaurant_id = o.restaurant_id)
  AND NOT EXISTS (SELECT 1 FROM payouts_payout p WHERE p.restaurant_id = o.restaurant_id
                  AND p.period_start <= o.delivered_at AND p.period_end > o.delivered_at)
"""


def weeks_due(timezone: str, onboarded_at: datetime, as_of: datetime) -> list[datetime]:
    """UTC starts of the local Monday-to-Monday weeks that end after ``onboarded_at`` and
    are settled by ``as_of``."""
    zone = ZoneInfo(timezone)
    local = onboarded_at.astimezone(zone).date()
    monday = local - timedelta(days=local.weekday())
    starts: list[datetime] = []
    while True:
        start = datetime.combine(monday, time(), tzinfo=zone).astimezone(UTC)
        end = datetime.combine(monday + timedelta(days=7), time(), tzinfo=zone).astimezone(UTC)
        if end + SETTLEMENT_DELAY > as_of:
            return starts
        if end > onboarded_at:
            starts.append(start)
        monday += timedelta(days=7)


def expected_payouts(db: ScenarioDatabase, *, as_of: datetime) -> set[tuple[int, datetime]]:
    """Every (restaurant, week start) that a pass as of ``as_of`` must have paid."""
    restaurants = db.rows("SELECT id, timezone, onboarded_at, deactivated_at FROM orders_restaurant")
    return {
        (rid, start)
        for rid, zone, onboarded, deactivated in restaurants
        for start in weeks_due(zone, onboarded, as_of)
        if deactivated is None or start < deactivated  # the ledger closes with the deactivation week
    }


def paid_weeks(db: ScenarioDatabase) -> list[tuple[int, datetime]]:
    """Every payout as (restaurant, week start); a list, so a duplicate would show."""
    return [(rid, start) for rid, start in db.rows("SELECT restaurant_id, period_start FROM payouts_payout")]


def assert_ledger_correct(db: ScenarioDatabase, *, as_of: datetime) -> int:
    """Each due week paid exactly once, nothing else paid, every amount right; returns
    the number of payouts."""
    paid = paid_weeks(db)
    assert len(paid) == len(set(paid)), "a week was paid twice"
    assert set(paid) == expected_payouts(db, as_of=as_of), "the paid weeks are not the due weeks"
    assert db.rows(MISMATCHED_PAYOUTS) == [], "a payout disagrees with its orders"
    assert db.rows(LEDGER_SEAMS) == [], "a payout does not start where the previous one ended"
    assert db.rows(UNCOVERED_ORDERS) == [], "a delivered order inside the ledger is in no payout"
    return len(paid)
