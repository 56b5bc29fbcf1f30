"""Database guards of the ledger (PostgreSQL): what a payout covers is immutable, whatever
path writes (admin, shell, a plain SQL statement).

- ``payouts_payout`` is append-only: no UPDATE or DELETE (corrections are new entries).
- ``orders_order``: an order a payout covers (delivered inside a paid period) cannot be
  deleted or have its status, total, restaurant or delivery time changed; and a delivery
  cannot land before the restaurant's last payout's end. The delivery check first takes
  FOR SHARE on the restaurant row, which the payout batch holds FOR NO KEY UPDATE while
  it writes (payouts/sql.py), so a delivery and a payout of the same restaurant never
  miss each other.
- ``orders_restaurant.commission_rate`` never changes (changes are rate-change rows), and
  ``orders_commissionratechange`` is append-only and cannot reach into a paid period.

TRUNCATE fires none of these; migration 0009 guards it with a statement trigger.

SQLite has no such guards; the services and the admin refuse the same changes there.
"""

from django.db import migrations

from tiffin.migration_operations import on_postgresql

_GUARDS = r"""
CREATE FUNCTION payouts_payout_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'payout % is part of the ledger and cannot be %d; corrections are new entries',
        OLD.id, lower(TG_OP) USING ERRCODE = 'restrict_violation';
END $$;
CREATE TRIGGER payouts_payout_append_only BEFORE UPDATE OR DELETE ON payouts_payout
    FOR EACH ROW EXECUTE FUNCTION payouts_payout_append_only();

CREATE FUNCTION orders_order_payout_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    paid_through timestamptz;
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.status = 'delivered'
       AND (TG_OP = 'DELETE' OR NEW.status IS DISTINCT FROM OLD.status OR NEW.total IS DISTINCT FROM OLD.total
            OR NEW.restaurant_id IS DISTINCT FROM OLD.restaurant_id
            OR NEW.delivered_at IS DISTINCT FROM OLD.delivered_at)
       AND EXISTS (SELECT 1 FROM payouts_payout p
                   WHERE p.restaurant_id = OLD.restaurant_id
                     AND p.period_start <= OLD.delivered_at AND p.period_end > OLD.delivered_at) THEN
        RAISE EXCEPTION 'order % is covered by a payout of restaurant %: it cannot be deleted or have its '
            'status, total, restaurant or delivery time changed', OLD.id, OLD.restaurant_id
            USING ERRCODE = 'restrict_violation';
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    IF NEW.status = 'delivered'
       AND (TG_OP = 'INSERT' OR OLD.status IS DISTINCT FROM 'delivered'
            OR NEW.delivered_at IS DISTINCT FROM OLD.delivered_at
            OR NEW.restaurant_id IS DISTINCT FROM OLD.restaurant_id) THEN
        PERFORM 1 FROM orders_restaurant WHERE id = NEW.restaurant_id FOR SHARE;
        SELECT p.period_end INTO paid_through FROM payouts_payout p
        WHERE p.restaurant_id = NEW.restaurant_id ORDER BY p.period_start DESC LIMIT 1;
        IF paid_through IS NOT NULL AND NEW.delivered_at < paid_through THEN
            RAISE EXCEPTION 'order % cannot be delivered at %: restaurant % is paid through %',
                NEW.id, NEW.delivered_at, NEW.restaurant_id, paid_through USING ERRCODE = 'restrict_violation';
        END IF;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER orders_order_payout_guard BEFORE INSERT OR UPDATE OR DELETE ON orders_order
    FOR EACH ROW EXECUTE FUNCTION orders_order_payout_guard();

CREATE FUNCTION orders_restaurant_rate_fixed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'restaurant %: the onboarding commission rate never changes; add a rate change instead',
        OLD.id USING ERRCODE = 'restrict_violation';
END $$;
CREATE TRIGGER orders_restaurant_rate_fixed BEFORE UPDATE OF commission_rate ON orders_restaurant
    FOR EACH ROW WHEN (OLD.commission_rate IS DISTINCT FROM NEW.commission_rate)
    EXECUTE FUNCTION orders_restaurant_rate_fixed();

CREATE FUNCTION orders_rate_change_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    paid_through timestamptz;
BEGIN
    IF TG_OP <> 'INSERT' THEN
        RAISE EXCEPTION 'rate change % is history and cannot be %d', OLD.id, lower(TG_OP)
            USING ERRCODE = 'restrict_violation';
    END IF;
    SELECT p.period_end INTO paid_through FROM payouts_payout p
    WHERE p.restaurant_id = NEW.restaurant_id ORDER BY p.period_start DESC LIMIT 1;
    IF paid_through IS NOT NULL AND NEW.effective_from < paid_through THEN
        RAISE EXCEPTION 'a rate change effective % would reach into restaurant %''s payouts (paid through %)',
            NEW.effective_from, NEW.restaurant_id, paid_through USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER orders_rate_change_guard BEFORE INSERT OR UPDATE OR DELETE ON orders_commissionratechange
    FOR EACH ROW EXECUTE FUNCTION orders_rate_change_guard();
"""

_DROP = """
DROP TRIGGER orders_rate_change_guard ON orders_commissionratechange;
DROP FUNCTION orders_rate_change_guard();
DROP TRIGGER orders_restaurant_rate_fixed ON orders_restaurant;
DROP FUNCTION orders_restaurant_rate_fixed();
DROP TRIGGER orders_order_payout_guard ON orders_order;
DROP FUNCTION orders_order_payout_guard();
DROP TRIGGER payouts_payout_append_only ON payouts_payout;
DROP FUNCTION payouts_payout_append_only();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("payouts", "0003_payout_rate_and_tzdata_version"),
        ("orders", "0002_ledger_deactivation_and_rate_history"),
    ]

    operations = [migrations.RunPython(on_postgresql(_GUARDS), on_postgresql(_DROP))]
