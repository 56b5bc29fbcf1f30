"""The order guard (0004) fires only for a row that is or was delivered.

orders_order_payout_guard() acts only when the old or the new row is ``delivered``; for
every other write (an order placed, accepted, rejected or cancelled) it returned the row
untouched, but PostgreSQL still called the PL/pgSQL function for each: about 25 us of
server CPU per order write, three writes per order on the dinner-rush path
(BENCHMARKS.md, benchmark 3). The same function now hangs on three triggers whose WHEN
clause is its own condition, evaluated without the call. A WHEN clause may not name OLD
on INSERT nor NEW on DELETE, hence one trigger per event. What the guard refuses is
unchanged (tests/integration/test_ledger.py tries every column it protects)."""

from django.db import migrations

from tiffin.migration_operations import on_postgresql

_PER_EVENT = """
DROP TRIGGER orders_order_payout_guard ON orders_order;
CREATE TRIGGER orders_order_payout_guard_insert BEFORE INSERT ON orders_order
    FOR EACH ROW WHEN (NEW.status = 'delivered') EXECUTE FUNCTION orders_order_payout_guard();
CREATE TRIGGER orders_order_payout_guard_update BEFORE UPDATE ON orders_order
    FOR EACH ROW WHEN (OLD.status = 'delivered' OR NEW.status = 'delivered')
    EXECUTE FUNCTION orders_order_payout_guard();
CREATE TRIGGER orders_order_payout_guard_delete BEFORE DELETE ON orders_order
    FOR EACH ROW WHEN (OLD.status = 'delivered') EXECUTE FUNCTION orders_order_payout_guard();
"""

_ONE = """
DROP TRIGGER orders_order_payout_guard_insert ON orders_order;
DROP TRIGGER orders_order_payout_guard_update ON orders_order;
DROP TRIGGER orders_order_payout_guard_delete ON orders_order;
CREATE TRIGGER orders_order_payout_guard BEFORE INSERT OR UPDATE OR DELETE ON orders_order
    FOR EACH ROW EXECUTE FUNCTION orders_order_payout_guard();
"""


class Migration(migrations.Migration):
    dependencies = [("payouts", "0005_payout_restaurant_served_by_unique_key")]

    operations = [migrations.RunPython(on_postgresql(_PER_EVENT), on_postgresql(_ONE))]
