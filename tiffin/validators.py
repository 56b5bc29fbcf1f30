"""Validators shared by several apps."""

from __future__ import annotations

from datetime import datetime

from django.core.exceptions import ValidationError
from django.utils import timezone

from tiffin.tz import TZDATA_VERSION, canonical_zones


def validate_time_zone(value: str) -> None:
    """Accept only canonical IANA zone names of the pinned tzdata (see ``tiffin.tz``)."""
    if value not in canonical_zones():
        raise ValidationError(
            f"{value!r} is not a canonical IANA time zone of tzdata {TZDATA_VERSION} "
            "(for example 'Europe/London'; links such as 'Asia/Calcutta', 'localtime' and "
            "abbreviations such as 'EST' are refused)."
        )


def require_aware(value: datetime, name: str) -> None:
    """Refuse a naive datetime loudly (Django would read it as UTC with only a warning)."""
    if timezone.is_naive(value):
        raise ValueError(f"{name} must be an aware datetime, got naive {value.isoformat()}")
