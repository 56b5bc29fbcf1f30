"""A guard against TRUNCATE of the ledger (PostgreSQL).

TRUNCATE fires no row trigger, so migration 0004's guards (payouts append-only, covered
orders immutable, rate changes history) did not stop it; and the deploy's one role owns
the tables, so "not granting TRUNCATE" protected nothing. A statement-level BEFORE
TRUNCATE trigger on ``payouts_payout``, ``orders_order`` and ``orders_commissionratechange``
refuses it unless the transaction has set ``tiffin.ledger_wipe`` to ``on``, which only
``payouts.services.ledger_wipe`` does (development settings and seed_demo's explicit
``--delete-payouts``). So Django's ``flush``, a TRUNCATE copied into a script or typed
into ``dbshell`` are refused, from the owner's connection too. It does not stop an owner
who means it (ALTER TABLE ... DISABLE TRIGGER, DROP TABLE, or a TRUNCATE of one year's
partition by name): that takes a role for migrations apart from the one the app runs as.
"""

from django.db import migrations

from tiffin.migration_operations import on_postgresql

_TABLES = ("payouts_payout", "orders_order", "orders_commissionratechange")

_GUARD = "\n".join(
    [
        r"""
CREATE FUNCTION ledger_truncate_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce(current_setting('tiffin.ledger_wipe', true), '') <> 'on' THEN
        RAISE EXCEPTION 'TRUNCATE of % refused: the ledger is append-only and a paid order must never look '
            'unpaid; only seed_demo --reset --delete-payouts, on a development database, empties it', TG_TABLE_NAME
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NULL;
END $$;
""",
        *(
            f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
            "FOR EACH STATEMENT EXECUTE FUNCTION ledger_truncate_guard();"
            for table in _TABLES
        ),
    ]
)

_DROP = "\n".join(
    [*(f"DROP TRIGGER {table}_no_truncate ON {table};" for table in _TABLES), "DROP FUNCTION ledger_truncate_guard();"]
)


class Migration(migrations.Migration):
    dependencies = [
        ("payouts", "0009_payout_money_holds_any_week_of_orders"),
        ("orders", "0004_order_pending_by_id"),
    ]

    operations = [migrations.RunPython(on_postgresql(_GUARD), on_postgresql(_DROP))]
