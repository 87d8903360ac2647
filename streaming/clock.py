"""Wall-clock time in epoch milliseconds, the unit of every timestamp fleetwatch stores."""

from __future__ import annotations

import time

__all__ = ["now_ms"]


def now_ms() -> int:
    """The wall clock now, in epoch milliseconds."""
    return int(time.time() * 1000)
