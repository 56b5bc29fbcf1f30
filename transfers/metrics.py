"""What /metrics shows of the transfers (docs/metrics.md), read from the database at each
scrape (``operations.metrics.database_gauges``): the newest reconciliation's counts and
when it ran, and the transfers not sent, by status."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from prometheus_client.core import GaugeMetricFamily, Metric

from operations.metrics import database_gauges
from transfers.reconciliation import MISMATCH_KINDS
from transfers.selectors import reconciliation_summary, transfers_unsent_counts


@database_gauges
def transfers_gauges(now: datetime) -> Iterator[Metric]:
    summary = reconciliation_summary()
    if summary is not None:
        yield GaugeMetricFamily(
            "tiffin_transfers_reconciled_timestamp_seconds",
            "When the newest successful reconciliation compared the provider's transfers with the ledger (Unix time).",
            value=summary.checked_at.timestamp(),
        )
        family = GaugeMetricFamily(
            "tiffin_transfers_reconciliation",
            "What the newest reconciliation found: transfers matched, and mismatches of each kind.",
            labels=["result"],
        )
        for result in ("matched", *MISMATCH_KINDS):
            family.add_metric([result], float(summary.counts.get(result, 0)))
        yield family
    unsent = GaugeMetricFamily(
        "tiffin_transfers_unsent",
        "Transfers not sent, by status (waiting for an account, pending, stopped, held).",
        labels=["status"],
    )
    for status, count in transfers_unsent_counts().items():
        unsent.add_metric([status], float(count))
    yield unsent
