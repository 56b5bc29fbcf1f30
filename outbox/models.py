"""The columns every outbox row has (``OutboxRow``): its payout's period start, with the
restaurant its business identity, and the state the shared services read and write
(outbox/services.py). Abstract: each outbox's table is its app's own, migrated there."""

from __future__ import annotations

from django.db import models


class OutboxRow(models.Model):
    """One payout's row in an outbox. Each app adds its links to the payout and the
    restaurant (each with its own reverse name), what it sends, frozen when the payout was
    written (the request to the provider, the email), its ``status`` with its own choices
    (``outbox.status``'s values and its waiting one), and its keys."""

    period_start = models.DateTimeField(help_text="The payout's period start (UTC): with the restaurant, its identity.")
    attempts = models.PositiveIntegerField(default=0)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField()
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True
        ordering = ["-created_at", "-id"]
