"""The statement outbox: one row per payout, the email frozen when the payout was written
(recipient, subject, body, Message-ID), and whether the mail server took it
(docs/statements.md)."""

from __future__ import annotations

from datetime import UTC, datetime

from django.db import models
from django.db.models import Q

from outbox import status as outbox
from outbox.models import OutboxRow
from statements.errors import StatementError

# The job that mails pending statements (statements/jobs.py).
SEND_STATEMENTS_JOB = "send-statements"
# One fencing resource for every "sent" the sender records: a run that recorded one makes
# every run with an older token stale (a paused sender's late record is refused).
SEND_FENCE_RESOURCE = "statements:send"


class StatementStatus(models.TextChoices):
    # Written while the restaurant had no statement_email: it goes once one is entered.
    WAITING_RECIPIENT = "waiting_recipient", "Waiting for the restaurant's statement email"
    PENDING = outbox.PENDING, "Pending (to send, or the last attempt failed)"
    SENT = outbox.SENT, "Sent (the mail server accepted it)"
    # Refused for good by the mail server (a 5xx reply to the recipient or the message):
    # a person fixes the address and retries it, with the same Message-ID.
    STOPPED = outbox.STOPPED, "Stopped (needs a person)"


def statement_message_id(*, restaurant_id: int, period_start: datetime, domain: str) -> str:
    """The Message-ID of a payout's statement, from its business identity only.

    The restaurant and the period start (in UTC), the same identity the transfer's
    idempotency key is made of: every attempt, every worker, and a row re-created after the
    database lost it, send the same id, so a receiver can drop a duplicate by it. Never the
    row id, the run, the attempt or the fence.
    """
    if period_start.tzinfo is None:
        raise StatementError(f"period_start {period_start.isoformat()} is naive; an identity needs an aware instant")
    return f"<payout-{restaurant_id}-{period_start.astimezone(UTC):%Y%m%dT%H%M%SZ}@{domain}>"


class Statement(OutboxRow):
    """The email of one payout, rendered once when the payout was written, and its fate.

    Never re-rendered: what was sent once is what is sent again, byte for byte in its
    content, under the same Message-ID.
    """

    # On PostgreSQL the ledger is partitioned and its primary key is (id, period_start),
    # so no database foreign key can name payouts_payout(id) alone; this column is the
    # ORM's link, and (restaurant, period_start) is the identity the unique key holds.
    payout = models.OneToOneField(
        "payouts.Payout", on_delete=models.PROTECT, related_name="statement", db_constraint=False
    )
    restaurant = models.ForeignKey("orders.Restaurant", on_delete=models.PROTECT, related_name="statements")
    recipient = models.EmailField(blank=True, help_text="Frozen when written (or when the restaurant gained one).")
    subject = models.CharField(max_length=255)
    body = models.TextField()
    message_id = models.CharField(max_length=255, unique=True)
    status = models.CharField(max_length=20, choices=StatementStatus.choices)

    class Meta(OutboxRow.Meta):
        # The admin's retry action, as for transfers: mailing again is a decision.
        permissions = [("retry_statement", "Can retry a stopped statement with the same Message-ID")]
        constraints = [
            models.UniqueConstraint(fields=["restaurant", "period_start"], name="statement_one_per_payout_identity"),
            models.CheckConstraint(condition=Q(status__in=StatementStatus.values), name="statement_status_known"),
            models.CheckConstraint(
                condition=Q(status=StatementStatus.WAITING_RECIPIENT) | ~Q(recipient=""),
                name="statement_recipient_unless_waiting",
            ),
            models.CheckConstraint(
                condition=~Q(status=StatementStatus.SENT) | Q(sent_at__isnull=False), name="statement_sent_has_sent_at"
            ),
        ]
        indexes = [
            # The sender's "due" query (outbox.selectors.outbox_due): pending rows by
            # next_attempt_at; the partial index holds only the few pending ones.
            models.Index(
                fields=["next_attempt_at"], name="statement_pending_due", condition=Q(status=StatementStatus.PENDING)
            ),
            # The admin's filter by status, and the waiting ones the sender attaches.
            models.Index(fields=["status"], name="statement_status"),
        ]

    def __str__(self) -> str:
        return f"statement {self.message_id}"
