"""The transfer's payout, checked once per statement instead of once per row (PostgreSQL).

0001 made it a deferred foreign key on (restaurant_id, period_start) to the ledger's unique
key. Against the partitioned ledger each of its checks is a plan over every partition,
run once per transfer at the commit: 4.15 s for the 40,000 transfers of benchmark 1's
catch-up (EXPLAIN ANALYZE, load about 10), and after two years of history (six
partitions, a million payouts) about 220 us a transfer, which made the weekly run 2.25 x
the run without history (docs/benchmark-history.md).

The same rows are refused by triggers instead:

- ``transfer_payout_identity_fk``: AFTER INSERT, once per statement, the statement's
  transfers as a transition table, one anti-join against the ledger's unique key; a
  transfer without its payout fails the statement with foreign_key_violation, naming the
  constraint it replaces.
- ``transfer_payout_identity_fk_update``: BEFORE UPDATE of a row whose restaurant or
  period start changes (the WHEN clause keeps every other update, the sender's, free of
  it): the new identity must be a payout.
- ``payouts_payout_transfers_remain``: AFTER TRUNCATE of the ledger, refused while
  transfers remain, as the foreign key refused a TRUNCATE of the ledger without them
  (``ledger_wipe`` truncates both in one statement, after which none remain).
- A payout is never updated or deleted (``payouts_payout_append_only``), so the payout a
  transfer names stays; the foreign key's other half had nothing left to check.

What differs: the check comes at the end of the INSERT, not at the commit (the pass writes
the payouts first, in the same transaction), and it takes no FOR KEY SHARE lock on the
payout (nothing may delete one); as for every ledger guard, an owner who disables the
triggers, or truncates a year's partition by name, is not stopped.
"""

from django.db import migrations

from tiffin.migration_operations import on_postgresql

_CHECK = r"""
ALTER TABLE transfers_transfer DROP CONSTRAINT transfer_payout_identity_fk;

CREATE FUNCTION transfers_payout_missing(restaurant_id bigint, period_start timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'insert or update on table "transfers_transfer" violates transfer_payout_identity_fk: '
        'no payout of restaurant % starts at %', restaurant_id, period_start
        USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'transfer_payout_identity_fk',
              TABLE = 'transfers_transfer';
END $$;

CREATE FUNCTION transfers_payout_identity_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    orphan record;
BEGIN
    SELECT n.restaurant_id, n.period_start INTO orphan FROM transfers_new n
    WHERE NOT EXISTS (SELECT 1 FROM payouts_payout p
                      WHERE p.restaurant_id = n.restaurant_id AND p.period_start = n.period_start)
    LIMIT 1;
    IF FOUND THEN
        PERFORM transfers_payout_missing(orphan.restaurant_id, orphan.period_start);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER transfer_payout_identity_fk AFTER INSERT ON transfers_transfer
    REFERENCING NEW TABLE AS transfers_new
    FOR EACH STATEMENT EXECUTE FUNCTION transfers_payout_identity_inserted();

CREATE FUNCTION transfers_payout_identity_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM payouts_payout p
                   WHERE p.restaurant_id = NEW.restaurant_id AND p.period_start = NEW.period_start) THEN
        PERFORM transfers_payout_missing(NEW.restaurant_id, NEW.period_start);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER transfer_payout_identity_fk_update BEFORE UPDATE ON transfers_transfer
    FOR EACH ROW WHEN (OLD.restaurant_id IS DISTINCT FROM NEW.restaurant_id
                       OR OLD.period_start IS DISTINCT FROM NEW.period_start)
    EXECUTE FUNCTION transfers_payout_identity_updated();

CREATE FUNCTION payouts_payout_transfers_remain() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM transfers_transfer) THEN
        RAISE EXCEPTION 'cannot truncate payouts_payout while transfers_transfer names its payouts '
            '(transfer_payout_identity_fk): truncate them together'
            USING ERRCODE = 'feature_not_supported';
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER payouts_payout_transfers_remain AFTER TRUNCATE ON payouts_payout
    FOR EACH STATEMENT EXECUTE FUNCTION payouts_payout_transfers_remain();
"""

_KEY = r"""
DROP TRIGGER payouts_payout_transfers_remain ON payouts_payout;
DROP FUNCTION payouts_payout_transfers_remain();
DROP TRIGGER transfer_payout_identity_fk_update ON transfers_transfer;
DROP FUNCTION transfers_payout_identity_updated();
DROP TRIGGER transfer_payout_identity_fk ON transfers_transfer;
DROP FUNCTION transfers_payout_identity_inserted();
DROP FUNCTION transfers_payout_missing(bigint, timestamptz);
ALTER TABLE transfers_transfer ADD CONSTRAINT transfer_payout_identity_fk
    FOREIGN KEY (restaurant_id, period_start) REFERENCES payouts_payout (restaurant_id, period_start)
    DEFERRABLE INITIALLY DEFERRED;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("transfers", "0002_transfer_held"),
    ]

    operations = [migrations.RunPython(on_postgresql(_CHECK), on_postgresql(_KEY))]
