"""The job's foreachBatch sink: output rows -> store and outbox, then the alerts topic.

Order (deploy/README.md, "The streaming job: outages, retention, the alerts topic"): a
micro-batch's rows, alerts and outbox go to the store in one transaction first, retried with
backoff while the store is unavailable; only then are its alerts handed on (the alerts topic:
best effort, a failure is logged and counted and never fails the batch). Every write is
idempotent, so a micro-batch that Spark re-runs after a crash changes nothing. Every
`retention.every_batches` batches the writer deletes what is older than the retention (best
effort as well). The quarantine is bounded in every batch (quarantine_rows.py): rows per reason
and batch, bytes per row, rows in the table (`retention.quarantine_*`). After a reset of the
detection state, once the new state's watermark has passed the moment of the reset, it resolves
the alerts the new state did not fire again, unless they started before the oldest telemetry the
new state read: those are carried over, firing, until the new state ends them
(streaming/detect/README.md, "Checkpoint reset").
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame
from sqlalchemy.exc import SQLAlchemyError

from streaming.config import RetentionConfig
from streaming.detect import SecondPass, carried_over_ends
from streaming.metrics import increment
from streaming.plumbing.clock import now_ms
from streaming.plumbing.cycles import no_cycle_collection
from streaming.plumbing.errors import first_line
from streaming.plumbing.resilience import Throttle, retry_store
from streaming.records.alert import Alert, SortKey
from streaming.records.contract import MAX_TRACKED_SOURCES
from streaming.records.job_output import STATE_TABLES, BatchOutput, ClockReading, latest_by_table
from streaming.sinks.quarantine_rows import bounded_quarantine, quarantine_rows
from streaming.store import SecondPassWrite, Store

__all__ = ["RESET_REASON", "BatchWriter", "KeyedAlert"]

log = logging.getLogger(__name__)

RESET_REASON = ("detection state reset: the job started on a new checkpoint, and the telemetry it re-read does not "
                "show this alert; it fires again, as a new alert, if its condition still holds")

# An alert handed on, with its sort key (for merging the alerts of several batches).
KeyedAlert = tuple[SortKey, Alert]


def _source_clocks(readings: list[ClockReading], now: int) -> list[dict[str, Any]]:
    """The batch's clock readings, one row per source (the chunks and partitions that saw it merged:
    the largest lead, the sums), at most MAX_TRACKED_SOURCES: those that lead the most."""
    merged: dict[str, dict[str, Any]] = {}
    for reading in readings:
        have = merged.get(reading.source)
        if have is None:
            merged[reading.source] = {"source": reading.source, "lead_ms": reading.lead_ms, "events": reading.events,
                                      "ahead": reading.ahead, "updated_ms": now}
        else:
            have["lead_ms"] = max(have["lead_ms"], reading.lead_ms)
            have["events"] += reading.events
            have["ahead"] += reading.ahead
    return heapq.nlargest(MAX_TRACKED_SOURCES, merged.values(), key=lambda r: r["lead_ms"])


def _tables(output: BatchOutput, quarantine: list[dict[str, Any]], now: int) -> dict[str, Any]:
    """Store table -> the batch's rows for it (each key once)."""
    return {
        **latest_by_table(output.states),
        "broker_transitions": {(t["cluster_id"], t["broker_id"], t["ts"], t["state"]): t
                               for t in output.transitions}.values(),
        "controller_history": {(c["cluster_id"], c["ts"]): c for c in output.controller_changes}.values(),
        "quarantine": quarantine,
        "source_clocks": _source_clocks(output.clocks, now),
    }


class BatchWriter:
    """Callable for `foreachBatch`.

    `on_alerts` receives each batch's alerts in event-time order, each beside its sort key (for
    merging batches), once the store has them; what it raises is logged and counted, never
    fails the batch. Without a store, only the callbacks and the counters see the output (a
    replay that writes a file only).

    `stop`: retry store writes on transient errors (backoff, one log line per retry) until they
    succeed or `stop` is set; without it a store error fails the batch at once (replay).
    `checkpoint`: (query name, a function giving the checkpoint's id) to record with the first
    batch, so that a later start on another checkpoint knows the open alerts are orphaned.
    `second_pass`: detection's second pass, run over each batch's rows before they are read
    (streaming/detect/second_pass.py); with a store and a checkpoint, its state goes to the store
    with each batch and is read back from there when a batch is run again or the job restarts.
    `orphaned_since`: when open alerts were orphaned by a reset (`Store.orphaned_since`); they are
    settled in the first batch that detection ran with a watermark past it (its `watermark` rows):
    resolved, or carried over when they started before the oldest event detection read since this
    writer started (its `earliest_event` rows). Carried-over alerts end when a batch's alerts and
    snapshots say so (`streaming.detect.carried_over_ends`).
    """

    def __init__(self, store: Store | None, *,
                 on_alerts: Callable[[list[KeyedAlert]], None] | None = None,
                 stop: threading.Event | None = None,
                 retention: RetentionConfig | None = None,
                 checkpoint: tuple[str, Callable[[], str | None]] | None = None,
                 orphaned_since: int | None = None,
                 second_pass: SecondPass | None = None) -> None:
        self.store = store
        self.second_pass = second_pass
        self._checkpoint_id: str | None = None
        self.on_alerts = on_alerts
        self.stop = stop
        self.retention = retention
        # The quarantine's bounds hold without retention too (a replay's store): its defaults.
        self._bounds = retention or RetentionConfig()
        self._not_stored = Throttle(60.0)
        self.checkpoint = checkpoint
        self.orphaned_since = orphaned_since
        self.watermark: int | None = None  # the largest detection ran with so far
        self.earliest_event: int | None = None  # the oldest event detection read so far
        self._carried: list[Alert] | None = None  # carried-over alerts, once read from the store
        self.quarantined: Counter[str] = Counter()
        self.batches = 0
        self._checkpoint_pending = checkpoint is not None
        self._hand_on_failures = Throttle()

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        # toPandas moves the batch as Arrow (collect() would pickle a Row per output row). It runs the batch's stages.
        frame = batch.toPandas()
        collected = time.monotonic()
        rows = zip(frame["kind"], frame["key"], frame["ts"], frame["payload"], strict=True)
        second_pass: SecondPassWrite | None = None
        if self.second_pass is not None:
            saved = self._second_pass_saved(batch_id)
            rows, changed = self.second_pass.run(batch_id, rows, saved)
            if saved is not None and changed:
                assert self.checkpoint is not None and self._checkpoint_id is not None
                second_pass = SecondPassWrite(self.checkpoint[0], self._checkpoint_id, batch_id, changed)
        # The batch's rows (~20,000 at 1,000 x 12) become dicts and tuples that form no cycles.
        with no_cycle_collection():
            output = BatchOutput.of(rows)
            now = now_ms()
            quarantine = quarantine_rows(output.refused, output.late, now)
            stored_quarantine, not_stored = bounded_quarantine(quarantine, self._bounds.quarantine_rows_per_reason)
            tables = None if self.store is None else _tables(output, stored_quarantine, now)
        if output.watermark is not None:
            self.watermark = max(self.watermark or output.watermark, output.watermark)
        if output.earliest_event is not None:
            self.earliest_event = min(self.earliest_event or output.earliest_event, output.earliest_event)
        keyed = output.alerts
        alerts = [alert for _, alert in keyed]
        states = output.states
        self.quarantined.update(q["reason"] for q in quarantine)
        if not_stored:
            increment("fleetwatch_quarantine_not_stored_total", sum(not_stored.values()))
            self._not_stored.warning(log, "quarantine: messages over retention.quarantine_rows_per_reason in one "
                                          "micro-batch counted, not stored", batch_id=batch_id,
                                     not_stored=dict(not_stored))
        if tables is not None:  # a store's
            if self._checkpoint_pending:
                assert self.checkpoint is not None
                current = self._current_checkpoint()  # Spark wrote it before the first batch
                if current is not None:
                    tables["job_checkpoints"] = [{"query": self.checkpoint[0], "checkpoint_id": current,
                                                  "recorded_at": now}]
            self._store(lambda: self.store.write_batch(tables, alerts,
                                                       quarantine_max_rows=self._bounds.quarantine_max_rows,
                                                       second_pass=second_pass),
                        "write a micro-batch")
            self._checkpoint_pending = self._checkpoint_pending and "job_checkpoints" not in tables
        if keyed and self.on_alerts is not None:
            self._hand_on(keyed, batch_id)
        self._resolve_orphans(batch_id)
        self._end_carried(alerts, {kind: [s.row for s in states if s.kind == kind] for kind in STATE_TABLES}, batch_id)
        self.batches += 1
        if self.store is not None and self.retention is not None and self.batches % self.retention.every_batches == 0:
            self._delete_expired()
        done = time.monotonic()
        log.info("batch written", extra={"batch_id": batch_id, "rows": len(frame), "alerts": len(alerts),
                                         "quarantined": len(quarantine), "not_stored": sum(not_stored.values()),
                                         "stages_ms": round((collected - started) * 1000),
                                         "written_ms": round((done - collected) * 1000)})

    def _current_checkpoint(self) -> str | None:
        if self._checkpoint_id is None and self.checkpoint is not None:
            self._checkpoint_id = self.checkpoint[1]()
        return self._checkpoint_id

    def _second_pass_saved(self, batch_id: int) -> Callable[[], dict[int, bytes]] | None:
        """Where the second pass reads its state from when the state in memory is not the batch
        before `batch_id`'s: the store (None without a store or a checkpoint: memory only)."""
        store, checkpoint = self.store, self._current_checkpoint()
        if store is None or checkpoint is None:
            return None
        assert self.checkpoint is not None
        query = self.checkpoint[0]
        return lambda: self._store(lambda: store.second_pass_buckets(query, checkpoint, batch_id),
                                   "read the second pass's state")

    def _store(self, action: Callable[[], Any], what: str) -> Any:
        if self.stop is None:
            return action()
        return retry_store(action, what=what, stop=self.stop,
                           on_retry=lambda: increment("fleetwatch_store_write_retries_total"))

    def _resolve_orphans(self, batch_id: int) -> None:
        """Once the new detection state has processed everything up to the reset (its watermark is
        past it), the alerts orphaned by the reset that it did not fire again are resolved, but
        those that started before the oldest telemetry it read: the bus no longer holds their
        evidence, the new state cannot fire them again, and they are carried over."""
        since, watermark = self.orphaned_since, self.watermark
        if self.store is None or since is None or watermark is None or watermark <= since:
            return
        store, evidence_since = self.store, self.earliest_event
        resolved, carried = self._store(
            lambda: store.resolve_orphaned_alerts(RESET_REASON, ends_at=since, evidence_since=evidence_since),
            "resolve orphaned alerts")
        self.orphaned_since = None
        self._carried = None  # read again: the carried-over alerts changed
        if carried:
            log.warning("detection state reset: alerts older than the telemetry the bus still holds carried over, "
                        "firing, until the new state ends them",
                        extra={"carried_over": carried, "orphaned_since": since, "evidence_since": evidence_since})
        if resolved:
            log.warning("detection state reset: alerts it no longer shows resolved",
                        extra={"resolved": len(resolved), "orphaned_since": since, "watermark": watermark})
            if self.on_alerts is not None:
                self._hand_on([(alert.sort_key(), alert) for alert in resolved], batch_id)

    def _end_carried(self, fired: list[Alert], snapshots: dict[str, list[dict[str, Any]]], batch_id: int) -> None:
        """Resolve the carried-over alerts that this batch's alerts or snapshots end."""
        if self.store is None or self.orphaned_since is not None:
            return  # none carried over yet: the reset is not settled
        store = self.store
        if self._carried is None:
            self._carried = self._store(store.carried_over_alerts, "read carried-over alerts")
        fired_ids = {alert.alert_id for alert in fired}  # fired again with its id: no longer carried over
        self._carried = [alert for alert in self._carried if alert.alert_id not in fired_ids]
        if not self._carried:
            return
        ended = carried_over_ends(self._carried, fired, snapshots)
        if not ended:
            return
        self._store(lambda: store.record_alerts(ended), "resolve carried-over alerts")
        done = {alert.alert_id for alert in ended}
        self._carried = [alert for alert in self._carried if alert.alert_id not in done]
        log.warning("carried-over alerts ended by the new detection state",
                    extra={"resolved": sorted(done), "reasons": sorted({a.details.get("reason") for a in ended})})
        if self.on_alerts is not None:
            self._hand_on([(alert.sort_key(), alert) for alert in ended], batch_id)

    def _hand_on(self, alerts: list[KeyedAlert], batch_id: int) -> None:
        assert self.on_alerts is not None
        try:
            self.on_alerts(alerts)
        except Exception as exc:  # best effort: the store and the outbox have the alerts
            increment("fleetwatch_alert_publish_failures_total", getattr(exc, "failed", len(alerts)))
            self._hand_on_failures.warning(log, "alerts not handed on (the store and the outbox have them)",
                                           batch_id=batch_id, alerts=len(alerts), error=first_line(exc, named=True))

    def _delete_expired(self) -> None:
        assert self.store is not None and self.retention is not None
        try:
            deleted = self.store.delete_expired(self.retention)
        except SQLAlchemyError as exc:  # the next round tries again
            log.warning("retention: could not delete expired rows", extra={"error": first_line(exc, named=True)})
            return
        if any(deleted.values()):
            increment("fleetwatch_retention_deleted_rows_total", sum(deleted.values()))
            log.info("retention: deleted expired rows", extra={"deleted": deleted})
