"""Validators shared by several apps."""

from __future__ import annotations

import zoneinfo
from datetime import datetime

from django.core.exceptions import ValidationError
from django.utils import timezone


def validate_time_zone(value: str) -> None:
    """Accept only IANA zone names that zoneinfo (with tzdata) knows."""
    if value not in zoneinfo.available_timezones():
        raise ValidationError(f"{value!r} is not an IANA time zone (for example 'Europe/London').")


def require_aware(value: datetime, name: str) -> None:
    """Refuse a naive datetime loudly (Django would read it as UTC with only a warning)."""
    if timezone.is_naive(value):
        raise ValueError(f"{name} must be an aware datetime, got naive {value.isoformat()}")
