"""The statuses the shared outbox code reads and writes. Each app's ``TextChoices`` uses
these values (with its own labels and its own waiting status)."""

from __future__ import annotations

PENDING = "pending"  # to send, or the last attempt's outcome is unknown or failed
SENT = "sent"  # the other side took it, and that is recorded
STOPPED = "stopped"  # given up: refused in a way no retry fixes; a person decides
