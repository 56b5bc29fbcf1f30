"""The payout statements, each one literal, whole and named, as ``scheduling.queries``
holds the engine's: what you read here is what the database receives. ``payouts.sql`` runs
them.

The payout statement (``INSERT_DUE_PAYOUTS``) computes and writes the payouts of a batch of
restaurants. Each restaurant's payouts are one contiguous sequence from its onboarding
week. The statement continues it: for every restaurant of the batch whose ledger is open,
the next payout starts exactly where its last one ended (``paid_through``; the start of its
onboarding week when it has none), and each due payout ends at the next local Monday 00:00
of the restaurant's current zone, for every such Monday finished as of the run. Only the
first of them can be shorter than a week, after a zone change or a tz database upgrade
moved the boundaries; no hour is ever left out or paid twice. A period with no orders gets
a zero payout. ``weeks`` (a JSON list, computed in Python by ``payouts.weeks`` for the
zones the batch uses) holds the candidate weeks per zone, each with ``listed_from``, the
start of its zone's first listed week.

- A restaurant is paid only if its zone's weeks reach back to where its ledger continues
  (``paid_through``, or its onboarding): a list that starts later would leave the hours
  between unpaid for good, so such a restaurant is left out, and the caller, told which
  restaurants were paid (the INSERT returns their ids, one per row), pays it from a list
  that reaches back to it. That lets the weekly run pass just the recent weeks and probe
  each ledger once, here.
- A ledger is open while the restaurant is active, and after its deactivation until the
  week it was deactivated in is paid (a period is due only if it starts before
  ``deactivated_at``).
- The commission rate is the restaurant's latest ``CommissionRateChange`` at or before
  the period's start, else its onboarding rate: a week paid late pays what it would
  have on time.
- Money: PostgreSQL sums ``numeric`` exactly and ``ROUND(numeric, 2)`` rounds half away
  from zero, which for amounts that are never negative is half-up. SQLite stores decimals
  as floats, so it sums whole cents (every total has two decimals, so ``ROUND(total *
  100)`` is exact) and rounds the commission half-up in integer arithmetic, ``(cents *
  rate_in_ten_thousandths + 5000) / 10000``; dividing by 100.0 gives the float SQLite
  itself would store for the decimal.

Indexes:

- ``order_delivered_by_restaurant`` (restaurant_id, delivered_at) INCLUDE (total) WHERE
  status = 'delivered': each period's orders are an index-only range scan (counting
  ``o.total``, which the index covers, not ``o.id``).
- ``payout_one_per_restaurant_week`` (restaurant_id, period_start): ``paid_through`` is
  the newest row of that index per restaurant, and the ON CONFLICT arbiter.
- ``rate_change_one_per_instant`` (restaurant_id, effective_from): the rate probe.
- the primary key of ``orders_restaurant`` for ``id BETWEEN first_id AND last_id`` (a
  range, not a list of ids: docs/design-notes.md).

The dry run (``SELECT_DUE_PAYOUTS``) is the INSERT's SELECT, alone and word for word
(``tests/unit/test_payout_sql.py`` checks), so it shows exactly what a pass would write.

Parameters are named: ``first_id``, ``last_id``, ``only`` (the ids of a restricted
catch-up, or NULL), ``weeks``, ``tzdata_version``, ``job_run_id``, ``fence``, ``now``.
PostgreSQL runs these three. SQLite, which has no LATERAL, no arrays and no row locks, runs
its own versions of the last two, under the same names (``payouts.queries_sqlite``), and
takes no lock.
"""

# Lock the batch's restaurants before reading their orders. A delivery takes FOR SHARE on
# its restaurant before it checks that the restaurant is not paid past the delivery (the
# orders_payout_guard trigger), so of the two whichever comes second waits: the payout's
# INSERT, a later statement with a new snapshot, then sees the committed delivery, or the
# delivery sees the committed payouts and is refused. NO KEY UPDATE does not block the
# foreign-key checks of orders being placed.
LOCK_BATCH = """
SELECT id FROM orders_restaurant
WHERE id BETWEEN %(first_id)s AND %(last_id)s AND (%(only)s::bigint[] IS NULL OR id = ANY(%(only)s::bigint[]))
ORDER BY id FOR NO KEY UPDATE
"""

# The payout statement: write every due payout of the batch (periods, ledger x weeks; then
# each period's rate; then each period's orders, summed in a LATERAL subquery: one
# index-only range scan feeding a plain aggregate per period), skip a period already paid
# (the arbiter is payout_one_per_restaurant_week), and return the restaurant id of every
# row written. The two OFFSET 0 keep PostgreSQL from flattening the subqueries: flattened,
# it re-ran the paid_through probe in each of the seven expressions naming it and the rate
# lookup in each of its three uses (docs/benchmark-history.md, benchmark 1). The INSERT
# comes first, not a CTE, because Python's sqlite3 reports a row count only for a
# statement that starts with INSERT (both backends keep one form); WHERE true tells
# SQLite's parser the upsert's ON CONFLICT from a join's ON.
INSERT_DUE_PAYOUTS = """
INSERT INTO payouts_payout (
    restaurant_id, week_start_local, period_start, period_end, gross, commission, net, order_count,
    commission_rate, tzdata_version, job_run_id, fence, created_at
)
SELECT * FROM (
    SELECT p.restaurant_id, p.week_start_local, p.period_start, p.period_end,
           s.gross, ROUND(s.gross * p.rate, 2), s.gross - ROUND(s.gross * p.rate, 2), s.order_count,
           p.rate, %(tzdata_version)s::text, %(job_run_id)s::bigint, %(fence)s::bigint, %(now)s::timestamptz
    FROM (
        SELECT periods.*,
               COALESCE((SELECT c.rate FROM orders_commissionratechange c
                         WHERE c.restaurant_id = periods.restaurant_id AND c.effective_from <= periods.period_start
                         ORDER BY c.effective_from DESC LIMIT 1), periods.onboarding_rate) AS rate
        FROM (
            SELECT l.id AS restaurant_id, w.week_start_local, w.period_end, l.commission_rate AS onboarding_rate,
                   GREATEST(w.period_start, l.paid_through) AS period_start
            FROM (
                SELECT r.id, r.timezone, r.onboarded_at, r.deactivated_at, r.commission_rate,
                       (SELECT p.period_end FROM payouts_payout p WHERE p.restaurant_id = r.id
                        ORDER BY p.period_start DESC LIMIT 1) AS paid_through
                FROM orders_restaurant r
                WHERE r.id BETWEEN %(first_id)s AND %(last_id)s
                  AND (%(only)s::bigint[] IS NULL OR r.id = ANY(%(only)s::bigint[]))
                OFFSET 0
            ) l
            JOIN jsonb_to_recordset(%(weeks)s::jsonb)
                 AS w (zone text, week_start_local date, period_start timestamptz, period_end timestamptz,
                       listed_from timestamptz)
              ON w.zone = l.timezone
            WHERE w.period_end > COALESCE(l.paid_through, l.onboarded_at)
              AND COALESCE(l.paid_through, l.onboarded_at) >= w.listed_from
              AND (l.deactivated_at IS NULL OR GREATEST(w.period_start, l.paid_through) < l.deactivated_at)
        ) periods
        OFFSET 0
    ) p
    CROSS JOIN LATERAL (
        SELECT COALESCE(SUM(o.total), 0) AS gross, COUNT(o.total) AS order_count
        FROM orders_order o
        WHERE o.restaurant_id = p.restaurant_id AND o.status = 'delivered'
          AND o.delivered_at >= p.period_start AND o.delivered_at < p.period_end
    ) s
) due WHERE true
ON CONFLICT (restaurant_id, period_start) DO NOTHING
RETURNING restaurant_id
"""

# The dry run: what INSERT_DUE_PAYOUTS would write, every column it writes, written nowhere.
SELECT_DUE_PAYOUTS = """
SELECT p.restaurant_id, p.week_start_local, p.period_start, p.period_end,
       s.gross, ROUND(s.gross * p.rate, 2), s.gross - ROUND(s.gross * p.rate, 2), s.order_count,
       p.rate, %(tzdata_version)s::text, %(job_run_id)s::bigint, %(fence)s::bigint, %(now)s::timestamptz
FROM (
    SELECT periods.*,
           COALESCE((SELECT c.rate FROM orders_commissionratechange c
                     WHERE c.restaurant_id = periods.restaurant_id AND c.effective_from <= periods.period_start
                     ORDER BY c.effective_from DESC LIMIT 1), periods.onboarding_rate) AS rate
    FROM (
        SELECT l.id AS restaurant_id, w.week_start_local, w.period_end, l.commission_rate AS onboarding_rate,
               GREATEST(w.period_start, l.paid_through) AS period_start
        FROM (
            SELECT r.id, r.timezone, r.onboarded_at, r.deactivated_at, r.commission_rate,
                   (SELECT p.period_end FROM payouts_payout p WHERE p.restaurant_id = r.id
                    ORDER BY p.period_start DESC LIMIT 1) AS paid_through
            FROM orders_restaurant r
            WHERE r.id BETWEEN %(first_id)s AND %(last_id)s
              AND (%(only)s::bigint[] IS NULL OR r.id = ANY(%(only)s::bigint[]))
            OFFSET 0
        ) l
        JOIN jsonb_to_recordset(%(weeks)s::jsonb)
             AS w (zone text, week_start_local date, period_start timestamptz, period_end timestamptz,
                   listed_from timestamptz)
          ON w.zone = l.timezone
        WHERE w.period_end > COALESCE(l.paid_through, l.onboarded_at)
          AND COALESCE(l.paid_through, l.onboarded_at) >= w.listed_from
          AND (l.deactivated_at IS NULL OR GREATEST(w.period_start, l.paid_through) < l.deactivated_at)
    ) periods
    OFFSET 0
) p
CROSS JOIN LATERAL (
    SELECT COALESCE(SUM(o.total), 0) AS gross, COUNT(o.total) AS order_count
    FROM orders_order o
    WHERE o.restaurant_id = p.restaurant_id AND o.status = 'delivered'
      AND o.delivered_at >= p.period_start AND o.delivered_at < p.period_end
) s
"""
