"""The transfer outbox: one row per payout with a positive net, the frozen request to the
payment provider, and what became of it (docs/transfers.md)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db import models
from django.db.models import Q

from outbox import status as outbox
from outbox.models import OutboxRow

# The job that sends pending transfers (transfers/jobs.py).
SEND_TRANSFERS_JOB = "send-transfers"
# The daily comparison of the provider's transfers with the ledger (transfers/jobs.py).
RECONCILE_TRANSFERS_JOB = "reconcile-transfers"
# One fencing resource for every answer the sender records: a run that recorded an answer
# makes every run with an older token stale (a paused sender's late answer is refused).
SEND_FENCE_RESOURCE = "transfers:send"


class TransferStatus(models.TextChoices):
    # Written without a destination: the restaurant has no provider account yet.
    WAITING_ACCOUNT = "waiting_account", "Waiting for the restaurant's provider account"
    PENDING = outbox.PENDING, "Pending (to send, or outcome unknown)"
    SENT = outbox.SENT, "Sent (the provider holds it)"
    # Refused in a way a retry cannot fix (same key, other parameters; an invalid
    # request): a person decides. Never re-sent with a new key.
    STOPPED = outbox.STOPPED, "Stopped (needs a person)"
    # More than one transfer can carry (Stripe: eight digits of minor units, 999,999.99 in
    # a two-decimal currency): never sent, held for a person to pay another way
    # (docs/transfers.md, "A payout larger than one transfer").
    HELD = "held", "Held: over what one transfer can carry (needs a person)"


def transfer_identity(*, restaurant_id: int, period_start: datetime) -> str:
    """The business identity of a payout: the idempotency key and the transfer group.

    Only the restaurant and the period start (in UTC): every attempt, every worker, and a
    row re-created after the database lost it, send the same key. Never the row id, the
    run, the attempt or the fence.
    """
    if period_start.tzinfo is None:
        raise ValueError(f"period_start {period_start.isoformat()} is naive; an identity needs an aware instant")
    return f"payout-{restaurant_id}-{period_start.astimezone(UTC):%Y%m%dT%H%M%SZ}"


class Transfer(OutboxRow):
    """The request to move one payout's net to the restaurant, frozen when the payout was
    written (amount, currency, destination, key), and its fate at the provider.

    The request is never recomputed from the payout: what was sent once is what is sent
    again, so a retry can only replay it, never pay a different amount under the same key.
    """

    # On PostgreSQL the ledger is partitioned and its primary key is (id, period_start):
    # the database's foreign key is (restaurant_id, period_start) to the ledger's unique key
    # (migration 0001); this column is the ORM's link.
    payout = models.OneToOneField(
        "payouts.Payout", on_delete=models.PROTECT, related_name="transfer", db_constraint=False
    )
    restaurant = models.ForeignKey("orders.Restaurant", on_delete=models.PROTECT, related_name="transfers")
    amount_minor = models.BigIntegerField(help_text="The payout's net in the currency's minor units (paise, cents).")
    currency = models.CharField(max_length=3)
    destination = models.CharField(max_length=255, blank=True, help_text="The restaurant's provider account.")
    idempotency_key = models.CharField(max_length=100, unique=True)
    transfer_group = models.CharField(max_length=100)
    status = models.CharField(max_length=16, choices=TransferStatus.choices)
    provider_id = models.CharField(max_length=255, blank=True, help_text="The provider's transfer id (tr_...).")
    first_attempt_at = models.DateTimeField(
        null=True, blank=True, help_text="When the key was first sent: the provider's key retention runs from here."
    )

    class Meta(OutboxRow.Meta):
        # The admin's retry action: sending money again is a decision, not a view.
        permissions = [("retry_transfer", "Can retry a stopped transfer with the same key")]
        constraints = [
            models.UniqueConstraint(fields=["restaurant", "period_start"], name="transfer_one_per_payout_identity"),
            models.CheckConstraint(condition=Q(amount_minor__gt=0), name="transfer_amount_positive"),
            models.CheckConstraint(condition=Q(status__in=TransferStatus.values), name="transfer_status_known"),
            models.CheckConstraint(
                condition=~Q(status=TransferStatus.SENT) | ~Q(provider_id=""), name="transfer_sent_has_provider_id"
            ),
            models.CheckConstraint(
                condition=Q(status=TransferStatus.WAITING_ACCOUNT) | ~Q(destination=""),
                name="transfer_destination_unless_waiting",
            ),
        ]
        indexes = [
            # The sender's "due" query (outbox.selectors.outbox_due): pending rows by
            # next_attempt_at; the partial index holds only the few pending ones.
            models.Index(
                fields=["next_attempt_at"], name="transfer_pending_due", condition=Q(status=TransferStatus.PENDING)
            ),
            # The admin's filter by status and the stopped-transfers invariant.
            models.Index(fields=["status"], name="transfer_status"),
        ]

    def __str__(self) -> str:
        return f"transfer {self.idempotency_key}"

    def request_params(self) -> dict[str, Any]:
        """The body of ``POST /v1/transfers``, from the frozen columns only. The metadata
        names the business identity, never the row id (a row re-created after a failover
        has another id, and other parameters under the same key are refused)."""
        return {
            "amount": self.amount_minor,
            "currency": self.currency,
            "destination": self.destination,
            "transfer_group": self.transfer_group,
            "metadata": {
                "restaurant_id": str(self.restaurant_id),
                "period_start": self.period_start.isoformat(),
                "idempotency_key": self.idempotency_key,
            },
        }
