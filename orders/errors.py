"""Errors the order services raise. Each carries its own message, so a command, view or
admin action can show ``str(error)`` to a person as it is."""

from __future__ import annotations

from collections.abc import Sequence


class OrderError(Exception):
    """Base of the errors a caller can cause through the order services."""


class OrderNotFoundError(OrderError, LookupError):
    def __init__(self, order_id: int) -> None:
        self.order_id = order_id
        super().__init__(f"order {order_id} does not exist")


class OrderTransitionError(OrderError):
    """A transition the order's current status does not allow; nothing was written.

    Raised both for a plainly illegal request and for the loser of a race: by the time
    its conditional UPDATE ran, the winner had already moved the order on.
    """

    def __init__(self, *, order_id: int, current: str, action: str, allowed_from: Sequence[str]) -> None:
        self.order_id = order_id
        self.current = current
        self.action = action
        self.allowed_from = tuple(allowed_from)
        sources = " or ".join(self.allowed_from)
        super().__init__(f"order {order_id} is {current}; only a {sources} order can be {action}")


class OrderDeadlineError(OrderTransitionError):
    """A move allowed only before the order's acceptance deadline, asked after it (by the
    database's clock); nothing was written. The stale-order cancellation cancels it. An
    OrderTransitionError, so a caller that handles a lost race handles this the same way:
    the order is, in effect, no longer placed."""

    def __init__(self, *, order_id: int, action: str) -> None:
        super().__init__(order_id=order_id, current="placed", action=action, allowed_from=("placed",))
        self.args = (
            f"order {order_id} is past its acceptance deadline and can no longer be {action}; "
            "it is cancelled as not accepted in time",
        )


class RestaurantNotFoundError(OrderError, LookupError):
    def __init__(self, restaurant_id: int) -> None:
        self.restaurant_id = restaurant_id
        super().__init__(f"restaurant {restaurant_id} does not exist")


class LedgerError(OrderError):
    """A change that would reach into money already paid or earned; nothing was written."""
