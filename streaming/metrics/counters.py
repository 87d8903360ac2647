"""The process counters: the bottom of the metrics stage (client_python's layout: counters below,
exposition on top). Any layer counts into them with `increment` (the batch writer, the progress
recorder) without knowing who serves them; `streaming.metrics.exposition` reads `counter_values()`
into `/metrics`. Imports nothing of the project, so every stage may use it."""

from __future__ import annotations

import threading

__all__ = ["COUNTERS", "counter_values", "increment"]

# name -> help of the process counters; their values, under a lock (any thread may count).
COUNTERS: dict[str, str] = {
    "fleetwatch_store_write_retries_total":
        "Store writes of the job retried after a transient error (database down, restarting or unreachable).",
    "fleetwatch_alert_publish_failures_total":
        "Alerts not published to the alerts topic (best effort: the store and the outbox have them).",
    "fleetwatch_retention_deleted_rows_total": "Rows the job deleted because they were older than the retention.",
    "fleetwatch_quarantine_not_stored_total":
        "Quarantined messages counted, not stored: over retention.quarantine_rows_per_reason of their reason "
        "in one micro-batch.",
    "fleetwatch_bus_records_lost_total":
        "Telemetry records the bus dropped before the job read them (retention, DeleteRecords, a deleted topic).",
}
_COUNTS: dict[str, float] = dict.fromkeys(COUNTERS, 0.0)
_COUNTS_LOCK = threading.Lock()


def increment(name: str, by: float = 1) -> None:
    """Add to a process counter (one of COUNTERS)."""
    if name not in COUNTERS:
        raise KeyError(f"unknown counter {name!r}")
    with _COUNTS_LOCK:
        _COUNTS[name] += by


def counter_values() -> dict[str, float]:
    """A consistent copy of every counter's value, for one scrape."""
    with _COUNTS_LOCK:
        return dict(_COUNTS)
