"""Validators shared by several apps."""

from __future__ import annotations

import zoneinfo

from django.core.exceptions import ValidationError


def validate_time_zone(value: str) -> None:
    """Accept only IANA zone names that zoneinfo (with tzdata) knows."""
    if value not in zoneinfo.available_timezones():
        raise ValidationError(f"{value!r} is not an IANA time zone (for example 'Europe/London').")
