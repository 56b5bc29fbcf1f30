"""A statement's payout, checked by the database (PostgreSQL), as a transfer's is.

A statement is written in the payout batch's transaction, after its payouts, and the
service never writes one without its payout; until now nothing below the service said so.
``payout`` cannot be a foreign key: the ledger is partitioned and its primary key is
``(id, period_start)``. The same triggers as ``transfers/migrations/0003`` refuse what a
foreign key would, and one thing more: the payout a statement names by ``payout_id`` must be
the payout of its (restaurant, period start).

- ``statement_payout_identity_fk``: AFTER INSERT, once per statement, the inserted
  statements as a transition table, one anti-join against the ledger's unique key; a
  statement without its payout fails the INSERT with foreign_key_violation.
- ``statement_payout_identity_fk_update``: BEFORE UPDATE of a row whose payout, restaurant
  or period start changes (the sender's updates never do).
- ``payouts_payout_statements_remain``: AFTER TRUNCATE of the ledger, refused while
  statements remain (``ledger_wipe`` deletes them first).
- A payout is never updated or deleted (``payouts_payout_append_only``), so nothing on the
  ledger's side can orphan a statement later.
"""

from django.db import migrations

from tiffin.migration_operations import on_postgresql

_CHECK = r"""
CREATE FUNCTION statements_payout_missing(payout_id bigint, restaurant_id bigint, period_start timestamptz)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'insert or update on table "statements_statement" violates statement_payout_identity_fk: '
        'no payout % of restaurant % starts at %', payout_id, restaurant_id, period_start
        USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'statement_payout_identity_fk',
              TABLE = 'statements_statement';
END $$;

CREATE FUNCTION statements_payout_identity_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    orphan record;
BEGIN
    SELECT n.payout_id, n.restaurant_id, n.period_start INTO orphan FROM statements_new n
    WHERE NOT EXISTS (SELECT 1 FROM payouts_payout p
                      WHERE p.restaurant_id = n.restaurant_id AND p.period_start = n.period_start
                        AND p.id = n.payout_id)
    LIMIT 1;
    IF FOUND THEN
        PERFORM statements_payout_missing(orphan.payout_id, orphan.restaurant_id, orphan.period_start);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER statement_payout_identity_fk AFTER INSERT ON statements_statement
    REFERENCING NEW TABLE AS statements_new
    FOR EACH STATEMENT EXECUTE FUNCTION statements_payout_identity_inserted();

CREATE FUNCTION statements_payout_identity_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM payouts_payout p
                   WHERE p.restaurant_id = NEW.restaurant_id AND p.period_start = NEW.period_start
                     AND p.id = NEW.payout_id) THEN
        PERFORM statements_payout_missing(NEW.payout_id, NEW.restaurant_id, NEW.period_start);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER statement_payout_identity_fk_update BEFORE UPDATE ON statements_statement
    FOR EACH ROW WHEN (OLD.payout_id IS DISTINCT FROM NEW.payout_id
                       OR OLD.restaurant_id IS DISTINCT FROM NEW.restaurant_id
                       OR OLD.period_start IS DISTINCT FROM NEW.period_start)
    EXECUTE FUNCTION statements_payout_identity_updated();

CREATE FUNCTION payouts_payout_statements_remain() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM statements_statement) THEN
        RAISE EXCEPTION 'cannot truncate payouts_payout while statements_statement names its payouts '
            '(statement_payout_identity_fk): delete the statements first'
            USING ERRCODE = 'feature_not_supported';
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER payouts_payout_statements_remain AFTER TRUNCATE ON payouts_payout
    FOR EACH STATEMENT EXECUTE FUNCTION payouts_payout_statements_remain();
"""

_DROP = r"""
DROP TRIGGER payouts_payout_statements_remain ON payouts_payout;
DROP FUNCTION payouts_payout_statements_remain();
DROP TRIGGER statement_payout_identity_fk_update ON statements_statement;
DROP FUNCTION statements_payout_identity_updated();
DROP TRIGGER statement_payout_identity_fk ON statements_statement;
DROP FUNCTION statements_payout_identity_inserted();
DROP FUNCTION statements_payout_missing(bigint, bigint, timestamptz);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("statements", "0002_statement_stopped"),
    ]

    operations = [migrations.RunPython(on_postgresql(_CHECK), on_postgresql(_DROP))]
