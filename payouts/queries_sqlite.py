"""SQLite's versions of the payout statements (``payouts.queries``, which says what they
compute and why), under the same names: SQLite has no LATERAL, no arrays (the id list and
the weeks are JSON read with ``json_each``), no GREATEST (``MAX(a, b)``) and stores decimals
as floats (money in whole cents). ``tiffin.db.queries_for_backend`` picks this module on SQLite;
only ``payouts.sql`` reads it.
"""

# queries.INSERT_DUE_PAYOUTS on SQLite: money in whole cents (``payouts.queries``), the
# orders joined to their periods and grouped (no LATERAL; on PostgreSQL that form first materialised all
# of a batch's orders into a hash aggregate, and was slower), MAX(a, b) for GREATEST (NULL
# if either is, hence the COALESCE around paid_through), the id list and the weeks read
# with json_each. No lock: SQLite's IMMEDIATE transactions (tiffin/env.py) take its one write
# lock first, so a delivery and a payout never interleave.
INSERT_DUE_PAYOUTS = """
INSERT INTO payouts_payout (
    restaurant_id, week_start_local, period_start, period_end, gross, commission, net, order_count,
    commission_rate, tzdata_version, job_run_id, fence, created_at
)
SELECT * FROM (
    SELECT due.restaurant_id, due.week_start_local, due.period_start, due.period_end,
           due.gross / 100.0, due.commission / 100.0, (due.gross - due.commission) / 100.0, due.order_count,
           due.rate, %(tzdata_version)s, %(job_run_id)s, %(fence)s, %(now)s
    FROM (
        SELECT p.restaurant_id, p.week_start_local, p.period_start, p.period_end, p.rate,
               COALESCE(SUM(CAST(ROUND(o.total * 100) AS INTEGER)), 0) AS gross,
               (COALESCE(SUM(CAST(ROUND(o.total * 100) AS INTEGER)), 0)
                * CAST(ROUND(p.rate * 10000) AS INTEGER) + 5000) / 10000 AS commission,
               COUNT(o.total) AS order_count
        FROM (
            SELECT periods.*,
                   COALESCE((SELECT c.rate FROM orders_commissionratechange c
                             WHERE c.restaurant_id = periods.restaurant_id AND c.effective_from <= periods.period_start
                             ORDER BY c.effective_from DESC LIMIT 1), periods.onboarding_rate) AS rate
            FROM (
                SELECT l.id AS restaurant_id, w.week_start_local, w.period_end, l.commission_rate AS onboarding_rate,
                       MAX(w.period_start, COALESCE(l.paid_through, w.period_start)) AS period_start
                FROM (
                    SELECT r.id, r.timezone, r.onboarded_at, r.deactivated_at, r.commission_rate,
                           (SELECT p.period_end FROM payouts_payout p WHERE p.restaurant_id = r.id
                            ORDER BY p.period_start DESC LIMIT 1) AS paid_through
                    FROM orders_restaurant r
                    WHERE r.id BETWEEN %(first_id)s AND %(last_id)s
                      AND (%(only)s IS NULL OR r.id IN (SELECT value FROM json_each(%(only)s)))
                ) l
                JOIN (
                    SELECT json_extract(value, '$.zone') AS zone,
                           json_extract(value, '$.week_start_local') AS week_start_local,
                           json_extract(value, '$.period_start') AS period_start,
                           json_extract(value, '$.period_end') AS period_end,
                           json_extract(value, '$.listed_from') AS listed_from
                    FROM json_each(%(weeks)s)
                ) w ON w.zone = l.timezone
                WHERE w.period_end > COALESCE(l.paid_through, l.onboarded_at)
                  AND COALESCE(l.paid_through, l.onboarded_at) >= w.listed_from
                  AND (l.deactivated_at IS NULL
                       OR MAX(w.period_start, COALESCE(l.paid_through, w.period_start)) < l.deactivated_at)
            ) periods
        ) p
        LEFT JOIN orders_order o
          ON o.restaurant_id = p.restaurant_id AND o.status = 'delivered'
         AND o.delivered_at >= p.period_start AND o.delivered_at < p.period_end
        GROUP BY p.restaurant_id, p.week_start_local, p.period_start, p.period_end, p.rate
    ) due
) due WHERE true
ON CONFLICT (restaurant_id, period_start) DO NOTHING
RETURNING restaurant_id
"""

# The dry run on SQLite: INSERT_DUE_PAYOUTS's SELECT, alone.
SELECT_DUE_PAYOUTS = """
SELECT due.restaurant_id, due.week_start_local, due.period_start, due.period_end,
       due.gross / 100.0, due.commission / 100.0, (due.gross - due.commission) / 100.0, due.order_count,
       due.rate, %(tzdata_version)s, %(job_run_id)s, %(fence)s, %(now)s
FROM (
    SELECT p.restaurant_id, p.week_start_local, p.period_start, p.period_end, p.rate,
           COALESCE(SUM(CAST(ROUND(o.total * 100) AS INTEGER)), 0) AS gross,
           (COALESCE(SUM(CAST(ROUND(o.total * 100) AS INTEGER)), 0)
            * CAST(ROUND(p.rate * 10000) AS INTEGER) + 5000) / 10000 AS commission,
           COUNT(o.total) AS order_count
    FROM (
        SELECT periods.*,
               COALESCE((SELECT c.rate FROM orders_commissionratechange c
                         WHERE c.restaurant_id = periods.restaurant_id AND c.effective_from <= periods.period_start
                         ORDER BY c.effective_from DESC LIMIT 1), periods.onboarding_rate) AS rate
        FROM (
            SELECT l.id AS restaurant_id, w.week_start_local, w.period_end, l.commission_rate AS onboarding_rate,
                   MAX(w.period_start, COALESCE(l.paid_through, w.period_start)) AS period_start
            FROM (
                SELECT r.id, r.timezone, r.onboarded_at, r.deactivated_at, r.commission_rate,
                       (SELECT p.period_end FROM payouts_payout p WHERE p.restaurant_id = r.id
                        ORDER BY p.period_start DESC LIMIT 1) AS paid_through
                FROM orders_restaurant r
                WHERE r.id BETWEEN %(first_id)s AND %(last_id)s
                  AND (%(only)s IS NULL OR r.id IN (SELECT value FROM json_each(%(only)s)))
            ) l
            JOIN (
                SELECT json_extract(value, '$.zone') AS zone,
                       json_extract(value, '$.week_start_local') AS week_start_local,
                       json_extract(value, '$.period_start') AS period_start,
                       json_extract(value, '$.period_end') AS period_end,
                       json_extract(value, '$.listed_from') AS listed_from
                FROM json_each(%(weeks)s)
            ) w ON w.zone = l.timezone
            WHERE w.period_end > COALESCE(l.paid_through, l.onboarded_at)
              AND COALESCE(l.paid_through, l.onboarded_at) >= w.listed_from
              AND (l.deactivated_at IS NULL
                   OR MAX(w.period_start, COALESCE(l.paid_through, w.period_start)) < l.deactivated_at)
        ) periods
    ) p
    LEFT JOIN orders_order o
      ON o.restaurant_id = p.restaurant_id AND o.status = 'delivered'
     AND o.delivered_at >= p.period_start AND o.delivered_at < p.period_end
    GROUP BY p.restaurant_id, p.week_start_local, p.period_start, p.period_end, p.rate
) due
"""
