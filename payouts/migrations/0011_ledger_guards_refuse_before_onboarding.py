"""The ledger's database guards (0004) also refuse what would fall before a ledger's start.

A restaurant's ledger starts with its onboarding: its first payout is the business week
that contains ``onboarded_at``. An order delivered before that instant, or left before
it by an onboarding moved later, would be in no payout, ever (issue 30, hole 2). So:

- ``orders_order_payout_guard`` refuses a delivery before the restaurant's
  ``onboarded_at``, as it refuses one before the restaurant's paid-through instant. It
  reads ``onboarded_at`` in the row it already takes FOR SHARE.
- ``orders_restaurant_onboarding_guard`` refuses moving ``onboarded_at`` once the
  restaurant has a payout (its first payout's bounds came from it), and moving it past an
  order the restaurant delivered. Updating the row takes its lock, which a delivery's FOR
  SHARE and a payout batch's FOR NO KEY UPDATE also take, so whichever comes second sees
  the other's commit.

``orders.services`` and the admin refuse the same with a message; SQLite has no triggers.
"""

from django.db import migrations

from tiffin.migration_operations import on_postgresql

_ORDER_GUARD = r"""
CREATE OR REPLACE FUNCTION orders_order_payout_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    paid_through timestamptz;
    onboarded_at timestamptz;
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
        SELECT r.onboarded_at INTO onboarded_at FROM orders_restaurant r WHERE r.id = NEW.restaurant_id FOR SHARE;
        IF NEW.delivered_at < onboarded_at THEN
            RAISE EXCEPTION 'order % cannot be delivered at %: restaurant % is onboarded at %, where its ledger starts',
                NEW.id, NEW.delivered_at, NEW.restaurant_id, onboarded_at USING ERRCODE = 'restrict_violation';
        END IF;
        SELECT p.period_end INTO paid_through FROM payouts_payout p
        WHERE p.restaurant_id = NEW.restaurant_id ORDER BY p.period_start DESC LIMIT 1;
        IF paid_through IS NOT NULL AND NEW.delivered_at < paid_through THEN
            RAISE EXCEPTION 'order % cannot be delivered at %: restaurant % is paid through %',
                NEW.id, NEW.delivered_at, NEW.restaurant_id, paid_through USING ERRCODE = 'restrict_violation';
        END IF;
    END IF;
    RETURN NEW;
END $$;
"""

# The two probes use payout_one_per_restaurant_week and order_delivered_by_restaurant.
_ONBOARDING_GUARD = r"""
CREATE FUNCTION orders_restaurant_onboarding_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM payouts_payout p WHERE p.restaurant_id = OLD.id) THEN
        RAISE EXCEPTION 'restaurant %: its onboarding cannot move once it has a payout (its ledger starts there)',
            OLD.id USING ERRCODE = 'restrict_violation';
    END IF;
    IF EXISTS (SELECT 1 FROM orders_order o WHERE o.restaurant_id = OLD.id AND o.status = 'delivered'
               AND o.delivered_at < NEW.onboarded_at) THEN
        RAISE EXCEPTION 'restaurant %: its onboarding cannot move to %, after orders it delivered',
            OLD.id, NEW.onboarded_at USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER orders_restaurant_onboarding_guard BEFORE UPDATE OF onboarded_at ON orders_restaurant
    FOR EACH ROW WHEN (OLD.onboarded_at IS DISTINCT FROM NEW.onboarded_at)
    EXECUTE FUNCTION orders_restaurant_onboarding_guard();
"""

# 0004's order guard, as it was.
_ORDER_GUARD_BEFORE = r"""
CREATE OR REPLACE FUNCTION orders_order_payout_guard() RETURNS trigger LANGUAGE plpgsql AS $$
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
DROP TRIGGER orders_restaurant_onboarding_guard ON orders_restaurant;
DROP FUNCTION orders_restaurant_onboarding_guard();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("payouts", "0010_ledger_truncate_guard"),
        ("orders", "0006_restaurant_onboarded_in_range"),
    ]

    operations = [
        migrations.RunPython(on_postgresql(_ORDER_GUARD + _ONBOARDING_GUARD), on_postgresql(_ORDER_GUARD_BEFORE))
    ]
