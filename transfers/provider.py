"""The payment provider, as the official ``stripe`` library sees it: the one place that
builds the client and names the calls the sender makes.

``PAYMENT_PROVIDER_URL`` is Stripe's API (https://api.stripe.com) with a real key, or
``provider_sandbox``'s address here. The library's own retries are off
(``max_network_retries=0``): the sender owns retries, with the same key, its backoff and
its record of every attempt, and a request that timed out must be judged by the sender,
not silently repeated inside one attempt.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import stripe
from django.conf import settings


def provider_configured() -> bool:
    """Whether a provider is configured (``PAYMENT_PROVIDER_URL``); without one the jobs
    send and reconcile nothing, and unsent transfers become problems of check_runs."""
    return bool(settings.PAYMENT_PROVIDER_URL)


def provider_client() -> stripe.StripeClient:
    """A client for the configured provider. Thread-safe for the sender's pool: the
    requests-based HTTP client keeps one session per thread."""
    return stripe.StripeClient(
        settings.PAYMENT_PROVIDER_KEY,
        base_addresses={"api": settings.PAYMENT_PROVIDER_URL},
        max_network_retries=0,
        http_client=stripe.RequestsClient(timeout=settings.PAYMENT_PROVIDER_TIMEOUT_SECONDS),
    )


@dataclass(frozen=True)
class ProviderTransfer:
    """What the provider holds for one transfer: enough to compare with the ledger."""

    id: str
    amount: int
    currency: str
    destination: str
    transfer_group: str
    metadata: dict[str, str]


def transfer_create(*, client: stripe.StripeClient, params: dict[str, Any], idempotency_key: str) -> ProviderTransfer:
    """``POST /v1/transfers`` with the ``Idempotency-Key`` header: the provider creates the
    transfer once per key and replays its first answer to every repeat."""
    created = client.v1.transfers.create(params, {"idempotency_key": idempotency_key})  # type: ignore[arg-type]
    return _provider_transfer(created)


def transfers_find(*, client: stripe.StripeClient, transfer_group: str) -> list[ProviderTransfer]:
    """``GET /v1/transfers?transfer_group=...``, every page: the transfers the provider
    holds for one business identity (none, one, or, if something went wrong, more)."""
    page = client.v1.transfers.list({"transfer_group": transfer_group, "limit": 100})
    return [_provider_transfer(item) for item in page.auto_paging_iter()]


def transfers_all(*, client: stripe.StripeClient, created_since: datetime | None = None) -> list[ProviderTransfer]:
    """Every transfer the provider holds (created at or after ``created_since`` by the
    provider's clock, if given), newest first, every page (reconciliation)."""
    params: dict[str, Any] = {"limit": 100}
    if created_since is not None:
        params["created"] = {"gte": int(created_since.timestamp())}
    page = client.v1.transfers.list(params)  # type: ignore[arg-type]
    return [_provider_transfer(item) for item in page.auto_paging_iter()]


def _provider_transfer(item: Any) -> ProviderTransfer:
    fields = item.to_dict()  # a StripeObject: a plain dict, with absent fields as absent keys
    return ProviderTransfer(
        id=str(fields["id"]),
        amount=int(fields["amount"]),
        currency=str(fields["currency"]),
        destination=str(fields.get("destination") or ""),
        transfer_group=str(fields.get("transfer_group") or ""),
        metadata={str(k): str(v) for k, v in (fields.get("metadata") or {}).items()},
    )


class Outcome(enum.Enum):
    """How the sender must treat a provider error."""

    # Same key, other parameters: the provider refuses for good. Stop, alert, never a new key.
    IDEMPOTENCY = "idempotency"
    # The provider may or may not have acted (timeout, reset, 5xx, 409 in flight, 429, or
    # our credentials refused, which a fixed configuration cures): retry with the same key.
    UNKNOWN = "unknown"
    # The provider read the request and refused it (an unknown account, a bad currency):
    # no retry makes it right. Stop and alert.
    REFUSED = "refused"
    # The amount is more than one transfer can carry (Stripe's code ``amount_too_large``):
    # no retry, and no retry by hand, makes it right. Hold and alert.
    TOO_LARGE = "too_large"


# Stripe's error code for an amount over what one transfer can carry.
AMOUNT_TOO_LARGE = "amount_too_large"


def error_outcome(error: stripe.StripeError) -> Outcome:
    """Classify an error the ``stripe`` library raised (see ``Outcome``)."""
    if isinstance(error, stripe.IdempotencyError):
        return Outcome.IDEMPOTENCY
    if isinstance(error, stripe.InvalidRequestError) and error.code == AMOUNT_TOO_LARGE:
        return Outcome.TOO_LARGE
    if isinstance(error, stripe.InvalidRequestError | stripe.CardError):
        return Outcome.REFUSED
    return Outcome.UNKNOWN
