"""The errors a caller can cause through the payout services, each with its own message."""

from __future__ import annotations

from collections.abc import Sequence


class PayoutError(Exception):
    """A request the payout services refuse; the message is for the person who made it."""


class RestaurantsUnpaidError(PayoutError):
    """A pass paid every restaurant it could and left these unpaid, each with the reason
    the database gave; the run ends failed so that it is retried and alerted."""

    def __init__(self, *, as_of: str, unpaid: Sequence[tuple[int, str]], written: int) -> None:
        self.unpaid = tuple(unpaid)
        listed = "; ".join(f"restaurant {restaurant_id}: {reason}" for restaurant_id, reason in self.unpaid)
        # One line: the missed-run check shows a failed run's last line.
        super().__init__(
            f"{len(self.unpaid)} restaurant(s) not paid as of {as_of} ({listed}); "
            f"the others were paid ({written} payouts written)"
        )
