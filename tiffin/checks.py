"""System checks for project-wide invariants."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register


@register()
def check_time_zone_is_utc(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Refuse to start unless storage and computation are in UTC.

    Every schedule, claim key and payout bound is computed in UTC; a non-UTC
    ``TIME_ZONE`` or naive datetimes would shift them by the server's offset.
    """
    errors = []
    if settings.TIME_ZONE != "UTC":
        errors.append(
            Error(
                f"TIME_ZONE is {settings.TIME_ZONE!r}; Tiffin requires 'UTC'.",
                hint="Local time belongs to restaurants and schedules, never to the server.",
                id="tiffin.E001",
            )
        )
    if not settings.USE_TZ:
        errors.append(Error("USE_TZ is off; Tiffin requires aware datetimes.", id="tiffin.E002"))
    return errors


@register(Tags.security, deploy=True)
def check_trusted_proxies_behind_a_proxy(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Warn when the settings say a proxy is in front (BEHIND_TLS_PROXY) but name none in
    TRUSTED_PROXIES: every request then comes from the proxy's address, so one client's
    wrong passwords lock the admin login out for everyone, and one client's explanations
    use up the public explainer's cap for everyone."""
    if getattr(settings, "SECURE_PROXY_SSL_HEADER", None) and not settings.TRUSTED_PROXIES:
        return [
            Warning(
                "BEHIND_TLS_PROXY is set but TRUSTED_PROXIES names no proxy: every client looks like the proxy.",
                hint="Set TRUSTED_PROXIES to the proxy's addresses or network (docs/configuration.md).",
                id="tiffin.W001",
            )
        ]
    return []


@register(deploy=True)
def check_payment_provider_configured(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Warn when no payment provider is configured: every payout's transfer is written and
    waits, and the missed-run check does not count a transfer late while no provider could
    have taken it (transfers.jobs.transfers_not_sent), so this is where a server says so."""
    if not settings.PAYMENT_PROVIDER_URL:
        return [
            Warning(
                "PAYMENT_PROVIDER_URL is not set: payouts are written but no transfer is sent.",
                hint="Set PAYMENT_PROVIDER_URL and PAYMENT_PROVIDER_KEY (docs/transfers.md).",
                id="tiffin.W002",
            )
        ]
    return []
