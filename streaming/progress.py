"""Streaming query progress: recorded in the store (pipeline page) and kept for the runners."""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from dataclasses import dataclass

from pyspark.sql.streaming import StreamingQueryListener
from sqlalchemy.exc import SQLAlchemyError

from streaming.bus_loss import records_lost, topics_changed
from streaming.clock import now_ms
from streaming.metrics import increment
from streaming.resilience import Throttle, one_line
from streaming.store import Store

__all__ = ["ProgressRecorder", "QueryStats"]

log = logging.getLogger(__name__)


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_400_YEARS_MS = 146_097 * 86_400_000  # the Gregorian calendar repeats every 400 years


def _iso_ms(text: str | None) -> int | None:
    """Spark's progress times ("2026-11-25T03:00:00.000Z") as epoch ms, for any year: a watermark
    that events from the far future moved past 9999 (datetime's limit) is still a number."""
    if not text:
        return None
    year, rest = text.split("-", 1)
    shift = (int(year) - 2000) // 400
    stamp = dt.datetime.fromisoformat(f"{int(year) - 400 * shift:04d}-{rest}".replace("Z", "+00:00"))
    return (stamp - _EPOCH) // dt.timedelta(milliseconds=1) + shift * _400_YEARS_MS


@dataclass
class QueryStats:
    batches: int = 0
    input_rows: int = 0
    max_event_ms: int | None = None
    watermark_ms: int | None = None
    last_batch_rows: int = 0
    state_rows: int = 0
    max_batch_ms: int = 0
    busy_ms: int = 0


class ProgressRecorder(StreamingQueryListener):
    """Listens to every query of the session; `stats[query name]` is updated per batch."""

    def __init__(self, store: Store | None) -> None:
        self.store = store
        self.stats: dict[str, QueryStats] = {}
        self.changed = threading.Condition()
        self._store_failures = Throttle()

    def onQueryStarted(self, event) -> None:
        log.info("query started", extra={"query": event.name, "id": str(event.id)})

    def onQueryProgress(self, event) -> None:
        try:
            self._record(event.progress)
        except Exception:
            # A listener that raises is silently dropped by Spark: say why, keep the query running.
            log.exception("could not record query progress")

    def _record(self, p) -> None:
        name = p.name or str(p.id)
        event_time = p.eventTime or {}
        state_rows = sum(op.numRowsTotal for op in p.stateOperators)
        duration = int((p.durationMs or {}).get("triggerExecution", 0))
        watermark_ms = _iso_ms(event_time.get("watermark"))
        # In the store first: whoever waits on the stats then finds the batch's row there too.
        if self.store is not None and p.numInputRows + state_rows > 0:
            self._write_progress(p, name, watermark_ms, duration, state_rows)
        with self.changed:
            stats = self.stats.setdefault(name, QueryStats())
            stats.batches += 1
            stats.input_rows += p.numInputRows
            stats.last_batch_rows = p.numInputRows
            stats.watermark_ms = watermark_ms
            batch_max = _iso_ms(event_time.get("max"))
            if batch_max is not None:
                stats.max_event_ms = max(stats.max_event_ms or batch_max, batch_max)
            stats.state_rows = state_rows
            stats.max_batch_ms = max(stats.max_batch_ms, duration)
            stats.busy_ms += duration
            self.changed.notify_all()
        log.info("batch progress", extra={"query": name, "batch_id": p.batchId, "rows": p.numInputRows,
                                          "duration_ms": duration, "watermark_ms": watermark_ms})
        self._count_bus_loss(p, name)

    def _count_bus_loss(self, p, name: str) -> None:
        """What the batch's Kafka sources planned and did not read: the bus had dropped it
        (streaming/bus_loss.py). Counted, and said in one line per batch that met it."""
        for source in p.sources:
            self._say_topics_changed(source, p.batchId, name)
            lost = records_lost(source.startOffset, source.endOffset, source.numInputRows)
            if lost:
                increment("fleetwatch_bus_records_lost_total", lost)
                log.warning("bus data loss: records the job had not read are gone from the bus; reading goes on "
                            "from what it holds", extra={"query": name, "batch_id": p.batchId, "lost": lost,
                                                         "source": source.description,
                                                         "from": source.startOffset, "to": source.endOffset})

    @staticmethod
    def _say_topics_changed(source, batch_id: int, name: str) -> None:
        """One line when a topic the job reads is deleted from the bus, one when it is back: the
        sources' own words are in Spark's JVM log or its Python workers, never in the job's log."""
        gone, back = topics_changed(source.startOffset, source.endOffset)
        for topic in gone:
            log.warning("bus topic deleted: the job reads nothing of it until it exists again (it does not "
                        "create it)", extra={"query": name, "batch_id": batch_id, "topic": topic})
        for topic in back:
            log.info("bus topic present again (or new): reading what it holds",
                     extra={"query": name, "batch_id": batch_id, "topic": topic})

    def _write_progress(self, p, name: str, watermark_ms: int | None, duration: int, state_rows: int) -> None:
        """One pipeline_progress row; best effort: while the store is away, progress rows are lost
        (the batches' own writes wait for it), and the warning repeats at most twice a minute."""
        assert self.store is not None
        try:
            self.store.write({"pipeline_progress": [{
                "query": name, "batch_id": p.batchId, "recorded_at": now_ms(),
                "input_rows": p.numInputRows,
                "input_rows_per_s": _finite(p.inputRowsPerSecond),
                "processed_rows_per_s": _finite(p.processedRowsPerSecond),
                "batch_duration_ms": duration, "watermark_ms": watermark_ms,
                "state_rows": state_rows,
                "state_memory_bytes": sum(op.memoryUsedBytes for op in p.stateOperators),
            }]})
        except SQLAlchemyError as exc:
            self._store_failures.warning(log, "query progress not recorded: store unavailable",
                                         query=name, batch_id=p.batchId, error=one_line(exc))

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        # A failure's own line is its runner's (`Supervisor`, replay): here only whether it failed.
        log.info("query terminated", extra={"id": str(event.id), "failed": event.exception is not None})

    def wait(self, name: str, predicate, timeout_s: float) -> bool:
        """Block until `predicate(stats)` holds for query `name`, or the timeout passes."""
        deadline = time.monotonic() + timeout_s
        with self.changed:
            while True:
                stats = self.stats.get(name)
                if stats is not None and predicate(stats):
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self.changed.wait(min(remaining, 1.0))


def _finite(value: float | None) -> float | None:
    if value is None or value != value or value in (float("inf"), float("-inf")):
        return None
    return float(value)
