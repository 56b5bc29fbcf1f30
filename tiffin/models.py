from __future__ import annotations

from django.db import models


class RequestCount(models.Model):
    """Requests one client made in the current window of one rate cap (``tiffin.ratelimit``):
    one row per cap and client, shared by every process that uses the database."""

    bucket = models.CharField(max_length=200, primary_key=True)
    window_start = models.DateTimeField()
    count = models.PositiveIntegerField()

    class Meta:
        db_table = "request_counts"
        # The prune of windows that are over: DELETE ... WHERE window_start < %s.
        indexes = [models.Index(fields=["window_start"], name="request_counts_window")]

    def __str__(self) -> str:
        return f"{self.bucket}: {self.count} since {self.window_start:%H:%M}"
