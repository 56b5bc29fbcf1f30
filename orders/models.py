from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q

from tiffin.validators import validate_time_zone

# The jobs of this app (orders/jobs.py); reads and writes both name them.
CANCEL_STALE_ORDER_JOB = "cancel-stale-order"
CANCEL_STALE_ORDERS_JOB = "cancel-stale-orders"
# A cancel-stale-order run's subject: this prefix and the order's id ("order:42").
ORDER_SUBJECT_PREFIX = "order:"
# What an order the stale-order cancellation cancelled records as its reason.
STALE_CANCEL_REASON = "not accepted in time"
# The largest order total taken (a catering order, not a typo's extra zeros). The payout
# columns are sized from it: a payout counts at most 2,147,483,647 orders (its
# ``order_count`` is an integer column), so its gross is at most that many times this,
# 214,748,364,700,000.00, which ``Payout.gross`` (numeric(17, 2)) holds. The ledger's money
# columns therefore cannot overflow on orders taken under this limit (docs/ledger.md).
ORDER_TOTAL_MAX = Decimal("100000.00")
# The range an onboarding instant may take: [ONBOARDED_FROM, ONBOARDED_BEFORE). A payout
# pass pays every finished week from a ledger's start, so the start bounds its work; a
# date typed wrong (1975, 2207) would otherwise mean thousands of weekly payouts.
ONBOARDED_FROM = datetime(2000, 1, 1, tzinfo=UTC)
ONBOARDED_BEFORE = datetime(2100, 1, 1, tzinfo=UTC)


def validate_onboarded_at(value: datetime) -> None:
    """Refuse an onboarding instant outside [ONBOARDED_FROM, ONBOARDED_BEFORE)."""
    if not ONBOARDED_FROM <= value < ONBOARDED_BEFORE:
        raise ValidationError(
            f"onboarding {value:%Y-%m-%d %H:%M} UTC is out of range: a restaurant is onboarded from "
            f"{ONBOARDED_FROM:%Y-%m-%d} to before {ONBOARDED_BEFORE:%Y-%m-%d} (UTC)"
        )


class Restaurant(models.Model):
    name = models.CharField(max_length=200)
    # IANA zone: business weeks (payouts) run Monday 00:00 to Monday 00:00 in it.
    timezone = models.CharField(max_length=64, validators=[validate_time_zone])
    # A fraction: 0.1500 is 15 %. The rate from onboarding on; it is never edited: a
    # change is a CommissionRateChange taking effect at an instant (payouts pay each week
    # at the rate in force when it began).
    commission_rate = models.DecimalField(max_digits=5, decimal_places=4)
    # Where its ledger starts (the start of this instant's business week): no order is
    # placed or delivered before it (orders.services; a trigger on PostgreSQL).
    onboarded_at = models.DateTimeField(validators=[validate_onboarded_at])
    # Inactive restaurants take no orders; their ledger stays open until the week they
    # were deactivated in is paid. Both move together (orders.services).
    is_active = models.BooleanField(default=True)
    deactivated_at = models.DateTimeField(null=True, blank=True)
    # Where the weekly statement of each payout is mailed. Blank until someone enters it:
    # its statements wait, flagged, and go once it is set (statements/). A database default,
    # so rows inserted by SQL that predates the column (bench, tests) get a blank one.
    statement_email = models.EmailField(
        blank=True, db_default="", help_text="Where weekly payout statements are mailed; they wait while it is blank."
    )
    # The restaurant's connected account at the payment provider ("acct_..."), where its
    # payouts are transferred. Blank until it is connected: its transfers wait, flagged.
    provider_account = models.CharField(
        max_length=255,
        blank=True,
        default="",
        db_default="",
        help_text="Connected account at the payment provider (acct_...); transfers wait while it is blank.",
        validators=[
            RegexValidator(r"^acct_[A-Za-z0-9]+$", "A provider account is 'acct_' followed by letters and digits.")
        ],
    )

    class Meta:
        ordering = ["name", "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(commission_rate__gte=Decimal("0")) & Q(commission_rate__lt=Decimal("1")),
                name="restaurant_commission_rate_fraction",
            ),
            models.CheckConstraint(
                condition=Q(is_active=True, deactivated_at__isnull=True)
                | Q(is_active=False, deactivated_at__isnull=False),
                name="restaurant_inactive_since_deactivation",
            ),
            # validate_onboarded_at, for every path (migration orders/0005).
            models.CheckConstraint(
                condition=Q(onboarded_at__gte=ONBOARDED_FROM) & Q(onboarded_at__lt=ONBOARDED_BEFORE),
                name="restaurant_onboarded_in_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.timezone})"


class CommissionRateChange(models.Model):
    """A restaurant's new commission rate from ``effective_from`` on. Append-only.

    A payout period is charged the rate of the latest change at or before the period's
    start (the restaurant's onboarding rate when there is none), so a change never
    reaches an order delivered before it took effect, and a week paid late is charged
    exactly what it would have been on time.
    """

    restaurant = models.ForeignKey(Restaurant, on_delete=models.PROTECT, related_name="rate_changes")
    rate = models.DecimalField(max_digits=5, decimal_places=4)
    effective_from = models.DateTimeField()
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["restaurant_id", "-effective_from"]
        constraints = [
            # Also the index of the payout SQL's "latest change at or before" probe.
            models.UniqueConstraint(fields=["restaurant", "effective_from"], name="rate_change_one_per_instant"),
            models.CheckConstraint(
                condition=Q(rate__gte=Decimal("0")) & Q(rate__lt=Decimal("1")), name="rate_change_rate_fraction"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.rate * 100:.2f} % from {self.effective_from:%Y-%m-%d %H:%M} UTC"


class OrderStatus(models.TextChoices):
    PLACED = "placed", "Placed"
    ACCEPTED = "accepted", "Accepted"
    REJECTED = "rejected", "Rejected"
    CANCELLED = "cancelled", "Cancelled"
    DELIVERED = "delivered", "Delivered"


class Order(models.Model):
    restaurant = models.ForeignKey(Restaurant, on_delete=models.PROTECT, related_name="orders")
    customer_ref = models.CharField(max_length=64)
    status = models.CharField(max_length=16, choices=OrderStatus.choices, default=OrderStatus.PLACED)
    total = models.DecimalField(
        max_digits=12,
        decimal_places=2,
        validators=[MinValueValidator(Decimal("0.01")), MaxValueValidator(ORDER_TOTAL_MAX)],
    )
    placed_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    rejected_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)
    cancel_reason = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-placed_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(total__gt=Decimal("0")), name="order_total_positive"),
            # Added NOT VALID on PostgreSQL (orders/migrations/0005): orders taken before the
            # limit existed stay as they were; every new or changed row is checked.
            models.CheckConstraint(condition=Q(total__lte=ORDER_TOTAL_MAX), name="order_total_at_most_max"),
            models.CheckConstraint(
                condition=~Q(status=OrderStatus.DELIVERED) | Q(delivered_at__isnull=False),
                name="order_delivered_has_delivered_at",
            ),
        ]
        indexes = [
            # Weekly payouts: SUM(total) of delivered orders per restaurant and week,
            # WHERE status = 'delivered' AND delivered_at in [period_start, period_end).
            models.Index(
                fields=["restaurant", "delivered_at"],
                name="order_delivered_by_restaurant",
                include=["total"],
                condition=Q(status=OrderStatus.DELIVERED),
            ),
            # The admin orders list, newest first (the default ordering -placed_at, -id, read
            # backwards with a LIMIT), its date drill-down's MIN/MAX and each day's range.
            models.Index(fields=["placed_at", "id"], name="order_placed_at"),
            # The orders still 'placed', by id: the safety net walks it oldest first, and
            # every "this order, if still placed" statement (accept, reject, the batch
            # cancel) may use it as a probe. Keyed by id, not placed_at: the planner picks
            # a partial index whose statistics say it is nearly empty (taken when little
            # was pending) for any query that implies its condition; keyed by placed_at,
            # each accept at a dinner rush then filtered every pending order by id.
            models.Index(
                fields=["id"],
                name="order_pending_by_id",
                condition=Q(status=OrderStatus.PLACED),
            ),
        ]

    def __str__(self) -> str:
        return f"Order {self.pk} ({self.status})"
