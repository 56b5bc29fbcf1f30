from __future__ import annotations

from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Round

# The job that writes payouts (payouts/jobs.py); reads and writes both name it.
PAYOUT_JOB = "weekly-payouts"


class Payout(models.Model):
    """One restaurant's settlement for one business week. Written once, never edited.

    A week runs Monday 00:00 to the next Monday 00:00 in the restaurant's zone;
    ``period_start``/``period_end`` are its bounds in UTC (167 or 169 hours apart in a
    DST week). A restaurant's payouts are one contiguous sequence: each starts exactly
    where the previous one ended, and only its end comes from the zone's next local
    Monday, so after a zone change or a tz database upgrade one period is shorter or
    longer than a week and no hour is paid twice or never. A week with no orders still
    gets a row, so "unpaid" means "after the last payout's end".
    """

    # No index of its own: payout_one_per_restaurant_week (restaurant_id, period_start)
    # leads with it and serves every lookup by restaurant (and the PROTECT check). A
    # second one would take a write in a page of its own per restaurant each week.
    restaurant = models.ForeignKey(
        "orders.Restaurant", on_delete=models.PROTECT, related_name="payouts", db_index=False
    )
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    week_start_local = models.DateField(help_text="The local Monday the business week starts on.")
    # Wide enough for any week of orders under ORDER_TOTAL_MAX (orders/models.py says why);
    # PostgreSQL stores a numeric by its value's digits, so the width costs nothing.
    gross = models.DecimalField(max_digits=17, decimal_places=2)
    commission = models.DecimalField(max_digits=17, decimal_places=2)
    net = models.DecimalField(max_digits=17, decimal_places=2)
    order_count = models.PositiveIntegerField()
    job_run = models.ForeignKey(
        "scheduling.JobRun", on_delete=models.PROTECT, null=True, blank=True, related_name="payouts"
    )
    fence = models.BigIntegerField(null=True, blank=True, help_text="Fencing token the write passed.")
    commission_rate = models.DecimalField(
        max_digits=5, decimal_places=4, help_text="The rate in force when the period began."
    )
    tzdata_version = models.CharField(
        max_length=16, help_text="The IANA tz database release the period's end was computed with."
    )
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["-period_start", "restaurant_id"]
        constraints = [
            # One payout per restaurant and week, whatever the fence says.
            models.UniqueConstraint(fields=["restaurant", "period_start"], name="payout_one_per_restaurant_week"),
            # Rounded to cents because SQLite stores decimals as floats: 1049.38 is not
            # exactly 1234.56 - 185.18 there (PostgreSQL's numeric is exact either way).
            models.CheckConstraint(
                condition=Q(net=Round(F("gross") - F("commission"), 2)), name="payout_net_is_gross_less_commission"
            ),
            models.CheckConstraint(condition=Q(period_end__gt=F("period_start")), name="payout_period_not_empty"),
        ]
        indexes = [
            # Admin payout history and the date hierarchy: ORDER BY / filter on period_start.
            models.Index(fields=["period_start"], name="payout_period_start"),
            # The hourly ledger check (payouts.selectors.ledger_problems, written_since):
            # the payouts written in its window, not a scan of the whole ledger.
            models.Index(fields=["created_at"], name="payout_created_at"),
        ]

    def __str__(self) -> str:
        # The admin's title and breadcrumb: the restaurant's name and its local week.
        return f"{self.restaurant.name}, week of {self.week_start_local:%a %d %b %Y}"
