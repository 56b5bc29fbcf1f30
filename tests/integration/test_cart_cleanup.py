"""The nightly cart clean-up: stale carts and their items go, in batches, as of the
run's logical time; a cart touched while it runs is never deleted."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
import time_machine
from django.db import connection

from carts import sql as carts_sql
from carts.errors import CartNotFoundError
from carts.models import Cart, CartItem
from carts.services import cart_add_item, cart_create, carts_delete_stale
from scheduling.execution import runs_execute
from scheduling.models import RunStatus
from scheduling.services import run_claim_manual
from tests.locks import held_in_thread, race_behind_lock

TICK = datetime(2027, 3, 10, 2, 0, tzinfo=UTC)  # a clean-carts tick
CUTOFF = TICK - timedelta(days=7)


def cart(updated_at: datetime, items: int = 2) -> Cart:
    made = cart_create(customer_ref="cust-00001", now=updated_at - timedelta(hours=1))
    for n in range(items):
        cart_add_item(cart_id=made.pk, sku=f"sku-{n}", quantity=1, unit_price=Decimal("4.50"), now=updated_at)
    return made


def clean(tick: datetime = TICK) -> dict[str, Any]:
    return clean_at(tick=tick, clock=tick + timedelta(minutes=1))


def clean_at(*, tick: datetime, clock: datetime) -> dict[str, Any]:
    """Run the clean-carts tick ``tick`` with the clock at ``clock``; its result."""
    with time_machine.travel(clock, tick=False):
        run = run_claim_manual(job_name="clean-carts", scheduled_for=tick, now=clock, enqueue=False)
        assert run is not None
        runs_execute(run_ids=[run.id], worker="test")
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert isinstance(run.result, dict)
    return run.result


@pytest.mark.django_db
def test_it_deletes_carts_untouched_for_seven_days_before_the_tick_with_their_items():
    stale = [cart(CUTOFF - timedelta(days=d)) for d in (1, 30)]
    fresh = cart(CUTOFF + timedelta(hours=1))
    result = clean()
    assert (result["deleted_carts"], result["deleted_items"]) == (2, 4)
    assert list(Cart.objects.values_list("id", flat=True)) == [fresh.pk]
    assert not CartItem.objects.filter(cart_id__in=[c.pk for c in stale]).exists()
    assert CartItem.objects.filter(cart=fresh).count() == 2


@pytest.mark.django_db
def test_a_cart_touched_exactly_seven_days_before_is_kept():
    kept = cart(CUTOFF)
    assert clean()["deleted_carts"] == 0
    assert Cart.objects.filter(pk=kept.pk).exists()


@pytest.mark.django_db
def test_the_cutoff_comes_from_the_tick_not_the_clock():
    # Run nine days late: a cart touched after the tick (8 days before the clock) stays,
    # one untouched for 7 days before the tick goes, with its items.
    touched_after_tick = cart(TICK + timedelta(hours=1))
    stale_at_tick = cart(CUTOFF - timedelta(hours=1))
    result = clean_at(tick=TICK, clock=TICK + timedelta(days=9))
    assert (result["deleted_carts"], result["deleted_items"]) == (1, 2)
    assert list(Cart.objects.values_list("id", flat=True)) == [touched_after_tick.pk]
    assert not CartItem.objects.filter(cart_id=stale_at_tick.pk).exists()


@pytest.mark.django_db
def test_a_second_run_for_the_same_tick_deletes_nothing():
    cart(CUTOFF - timedelta(days=1))
    clean()
    assert carts_delete_stale(cutoff=CUTOFF, batch_size=100).carts == 0


@pytest.mark.django_db
def test_it_works_in_short_batches(settings):
    settings.CART_CLEANUP_BATCH_SIZE = 3
    for d in range(7):
        cart(CUTOFF - timedelta(days=d + 1), items=1)
    cart(TICK)
    result = clean()
    assert (result["deleted_carts"], result["batches"]) == (7, 3)
    assert Cart.objects.count() == 1


@pytest.mark.django_db
def test_a_cart_the_delete_keeps_keeps_its_items(monkeypatch):
    # SQLite's three statements: the delete's re-check keeps a cart (as it would one
    # touched after the pick, were it not locked): its items stay, the others' go.
    if connection.vendor == "postgresql":
        pytest.skip("one statement on PostgreSQL: the pick's lock keeps every picked cart as picked")
    kept, gone = cart(CUTOFF - timedelta(days=2), items=2), cart(CUTOFF - timedelta(days=3), items=1)
    real_carts_delete = carts_sql.carts_delete

    def keeping_one(*, cart_ids: list[int], cutoff: datetime) -> list[int]:
        return real_carts_delete(cart_ids=[i for i in cart_ids if i != kept.pk], cutoff=cutoff)

    monkeypatch.setattr(carts_sql, "carts_delete", keeping_one)
    result = carts_delete_stale(cutoff=CUTOFF, batch_size=10)
    assert (result.carts, result.items) == (1, 1)
    assert sorted(CartItem.objects.filter(cart_id=kept.pk).values_list("sku", flat=True)) == ["sku-0", "sku-1"]
    assert not Cart.objects.filter(pk=gone.pk).exists()
    assert not CartItem.objects.filter(cart_id=gone.pk).exists()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_cart_being_changed_while_the_clean_up_runs_is_not_deleted():
    in_use, abandoned = cart(CUTOFF - timedelta(days=2)), cart(CUTOFF - timedelta(days=3))

    def customer() -> None:  # a second connection: adds to the cart, commits a moment later
        cart_add_item(cart_id=in_use.pk, sku="mango-lassi", quantity=1, unit_price=Decimal("3.99"), now=TICK)

    with held_in_thread(customer):
        result = carts_delete_stale(cutoff=CUTOFF, batch_size=10)  # does not wait: the cart is skipped
    assert (result.carts, result.items) == (1, 2)
    assert not Cart.objects.filter(pk=abandoned.pk).exists()
    kept = Cart.objects.get(pk=in_use.pk)
    assert kept.updated_at == TICK
    assert sorted(kept.items.values_list("sku", flat=True)) == ["mango-lassi", "sku-0", "sku-1"]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_change_that_arrives_during_a_batch_waits_and_finds_the_cart_gone(monkeypatch):
    doomed = cart(CUTOFF - timedelta(days=2))
    carts_deleted, release = threading.Event(), threading.Event()
    real_batch_delete = carts_sql.stale_batch_delete

    def pausing_batch_delete(**kwargs: Any) -> carts_sql.StaleBatch:
        batch = real_batch_delete(**kwargs)
        carts_deleted.set()  # the batch has deleted the cart, and not committed
        release.wait(10)
        return batch

    monkeypatch.setattr(carts_sql, "stale_batch_delete", pausing_batch_delete)
    outcome: dict[str, Any] = {}

    def clean_up() -> None:
        outcome["result"] = carts_delete_stale(cutoff=CUTOFF, batch_size=10)

    def customer() -> None:
        try:
            cart_add_item(cart_id=doomed.pk, sku="gulab-jamun", quantity=1, unit_price=Decimal("4.50"), now=TICK)
        except CartNotFoundError as error:
            outcome["customer"] = error

    # The customer's touch waits for the batch's row lock.
    race_behind_lock(holder=clean_up, holding=carts_deleted, waiter=customer, release=release)
    assert outcome["result"].carts == 1
    assert isinstance(outcome.get("customer"), CartNotFoundError)
    assert not Cart.objects.filter(pk=doomed.pk).exists()
    assert not CartItem.objects.filter(cart_id=doomed.pk).exists()


@pytest.mark.postgres
@pytest.mark.django_db
def test_a_batch_reads_its_own_range_of_both_tables_not_all_of_them():
    # Without the batch's id range the planner hashed every stale cart (and, before that,
    # every item) once per batch: the clean-up grew with the square of the table.
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO carts_cart (customer_ref, created_at, updated_at) "
            "SELECT 'c-' || i, %s, %s FROM generate_series(1, 20000) AS i",
            [CUTOFF - timedelta(days=3), CUTOFF - timedelta(days=2)],
        )
        cursor.execute(
            "INSERT INTO carts_cartitem (cart_id, sku, quantity, unit_price) "
            "SELECT id, 'sku-' || k, 1, 4.50 FROM carts_cart CROSS JOIN generate_series(1, 3) AS k"
        )
        cursor.execute("ANALYZE carts_cart")
        cursor.execute("ANALYZE carts_cartitem")
        cursor.execute("SELECT min(id) + 10000 FROM carts_cart")
        (middle,) = cursor.fetchone()
        params = {"cutoff": CUTOFF, "after_id": middle, "batch_size": 500}
        cursor.execute("EXPLAIN (FORMAT JSON) " + carts_sql.STALE_BATCH_DELETE, params)
        (plan,) = cursor.fetchone()

    def scans(node: dict[str, Any]) -> list[tuple[str, str]]:
        found = [(node["Node Type"], node.get("Relation Name", ""))] if "Relation Name" in node else []
        return found + [scan for child in node.get("Plans", []) for scan in scans(child)]

    read = scans(plan[0]["Plan"])
    assert {relation for _, relation in read} == {"carts_cart", "carts_cartitem"}
    assert not [scan for scan in read if scan[0] == "Seq Scan"], read
    batch = carts_delete_stale(cutoff=CUTOFF, batch_size=500)
    assert (batch.carts, batch.items, batch.batches) == (20000, 60000, 40)
