"""The daily reconciliation: the provider's record of transfers against the ledger.

The provider's list is the truth about money that left; the ledger is the truth about
money owed. ``transfers_reconcile`` reads both and names every disagreement:

1. a transfer group the provider holds more than once (a payout paid twice);
2. a provider transfer the ledger does not know (no transfer row has its group);
3. a provider transfer whose amount, currency or destination is not the frozen request's;
4. a transfer the provider holds while the ledger says it is not sent, once no attempt is
   younger than the grace (a recent one is the sender's business, not a problem yet);
5. a transfer the ledger says is sent whose provider id the provider's list lacks;
6. a positive payout not sent after the grace (waiting for an account, retrying, stopped, held).

It reads and reports only: the ledger may be repaired from the provider's record by a
person; money is never sent to repair the ledger. With a window, only provider transfers
created in it are listed, and cases 5 and 6 are judged for rows well inside it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

import stripe

from transfers import provider
from transfers.models import Transfer, TransferStatus
from transfers.provider import ProviderTransfer

# Ledger rows read per query (the provider's groups are looked up in chunks).
_CHUNK = 2000


# The kinds of mismatch, in the module doc's order (cases 1 to 6).
MISMATCH_KINDS = ("double", "unknown", "different", "not_recorded", "missing", "unsent")


@dataclass(frozen=True)
class Mismatch:
    kind: str  # one of MISMATCH_KINDS
    transfer_group: str
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Reconciliation:
    """What one comparison found: ``matched`` transfers the provider holds exactly as the
    ledger recorded them (one for the group, sent with that id, the same amount, currency
    and destination), and every mismatch."""

    matched: int
    mismatches: list[Mismatch]

    def counts(self) -> dict[str, int]:
        """``matched`` and the number of mismatches of each kind (0 included)."""
        found = Counter(mismatch.kind for mismatch in self.mismatches)
        return {"matched": self.matched, **{kind: found[kind] for kind in MISMATCH_KINDS}}


def transfers_reconcile(
    *, client: stripe.StripeClient, now: datetime, created_since: datetime | None, grace: timedelta
) -> Reconciliation:
    """Every disagreement between the provider and the ledger (module doc), by group, and
    how many transfers agree."""
    held: dict[str, list[ProviderTransfer]] = defaultdict(list)
    for item in provider.transfers_all(client=client, created_since=created_since):
        held[item.transfer_group].append(item)
    rows = _rows_of_groups(sorted(held))
    mismatches: list[Mismatch] = []
    matched = 0
    for group, items in sorted(held.items()):
        found = _judge_held(group, items, rows.get(group), now=now, grace=grace)
        mismatches += found
        if not found and _recorded_as_held(items, rows.get(group)):
            matched += 1
    mismatches += _judge_ledger(held, now=now, created_since=created_since, grace=grace)
    return Reconciliation(matched=matched, mismatches=mismatches)


def _recorded_as_held(items: list[ProviderTransfer], row: Transfer | None) -> bool:
    """The one transfer of a group is the ledger's sent row, under its provider id."""
    return row is not None and row.status == TransferStatus.SENT and [i.id for i in items] == [row.provider_id]


def _rows_of_groups(groups: list[str]) -> dict[str, Transfer]:
    rows: dict[str, Transfer] = {}
    for start in range(0, len(groups), _CHUNK):
        for row in Transfer.objects.filter(transfer_group__in=groups[start : start + _CHUNK]):
            rows[row.transfer_group] = row
    return rows


def _judge_held(
    group: str, items: list[ProviderTransfer], row: Transfer | None, *, now: datetime, grace: timedelta
) -> list[Mismatch]:
    """Cases 1-4 for one group the provider holds."""
    ids = ", ".join(item.id for item in items)
    if row is None:
        return [Mismatch("unknown", group, f"the provider holds {ids}, which the ledger does not know")]
    found: list[Mismatch] = []
    if len(items) > 1:
        found.append(Mismatch("double", group, f"the provider holds {len(items)} transfers for one payout: {ids}"))
    for item in items:
        if (item.amount, item.currency, item.destination) != (row.amount_minor, row.currency, row.destination):
            found.append(
                Mismatch(
                    "different",
                    group,
                    f"{item.id} is {item.amount} {item.currency} to {item.destination!r}; the ledger's request is "
                    f"{row.amount_minor} {row.currency} to {row.destination!r}",
                )
            )
    settled = row.last_attempt_at is None or row.last_attempt_at <= now - grace
    if row.status != TransferStatus.SENT and settled:
        found.append(Mismatch("not_recorded", group, f"the provider holds {ids}; the ledger says {row.status}"))
    return found


def _judge_ledger(
    held: dict[str, list[ProviderTransfer]], *, now: datetime, created_since: datetime | None, grace: timedelta
) -> list[Mismatch]:
    """Cases 5 and 6: rows the ledger holds that the provider's list should show."""
    found: list[Mismatch] = []
    judged_from = created_since + grace if created_since is not None else None
    sent = Transfer.objects.filter(status=TransferStatus.SENT)
    if judged_from is not None:
        sent = sent.filter(sent_at__gte=judged_from)
    held_ids = {item.id for items in held.values() for item in items}
    for group, provider_id in sent.values_list("transfer_group", "provider_id").iterator(chunk_size=_CHUNK):
        if provider_id not in held_ids:
            found.append(Mismatch("missing", group, f"the ledger says sent as {provider_id}; the provider lists none"))
    not_sent = [TransferStatus.WAITING_ACCOUNT, TransferStatus.PENDING, TransferStatus.STOPPED, TransferStatus.HELD]
    unsent = Transfer.objects.filter(status__in=not_sent, created_at__lte=now - grace)  # index transfer_status
    for group, status, error in unsent.values_list("transfer_group", "status", "last_error").iterator(
        chunk_size=_CHUNK
    ):
        if group not in held:
            found.append(Mismatch("unsent", group, f"a paid week without a transfer: {status}; {error or 'no error'}"))
    return found
