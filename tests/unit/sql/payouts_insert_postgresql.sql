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
