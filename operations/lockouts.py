"""The admin login lockout (django-axes, configured in tiffin/settings.py) raises an alert.

django-axes sends ``user_locked_out`` twice over: when the failure that reaches the limit
is counted, and again for every attempt refused during the lockout. Only the first is
news: it is the one with a failure count (a refused attempt is not counted, so its count
is None). Two failures racing past the limit together may both alert; none is lost.
The request only logs the lockout and queues its mail and webhook for a worker
(``operations.alerts.lockout_alert``): a slow mail server never holds a login up.
"""

from __future__ import annotations

from typing import Any

from axes.signals import user_locked_out  # type: ignore[import-untyped]
from django.conf import settings
from django.dispatch import receiver
from django.http import HttpRequest

from operations.alerts import lockout_alert
from scheduling.metrics import login_lockout_count


@receiver(user_locked_out, dispatch_uid="operations.lockouts")
def lockout_heard(sender: Any, *, request: HttpRequest, username: str | None, ip_address: str, **kwargs: Any) -> None:
    failures = getattr(request, "axes_failures_since_start", None)
    if failures is None:
        return  # an attempt refused during a lockout already alerted
    at = request.axes_attempt_time  # type: ignore[attr-defined]
    login_lockout_count()
    lockout_alert(
        username=username or "", ip_address=ip_address, failures=failures, at=at, until=at + settings.AXES_COOLOFF_TIME
    )
