"""Wall-clock time in epoch milliseconds, the unit of every timestamp fleetwatch stores."""

from __future__ import annotations

import time
from datetime import UTC, datetime

__all__ = ["iso_ms", "now_ms"]


def now_ms() -> int:
    """The wall clock now, in epoch milliseconds."""
    return int(time.time() * 1000)


def iso_ms(ms: int) -> str:
    """Epoch milliseconds as ISO 8601 in UTC, to the millisecond (`2026-11-27T09:00:00.000Z`)."""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
