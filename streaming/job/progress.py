"""Streaming query progress: recorded in the store (pipeline page) and kept for the runners."""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener
from pyspark.sql.streaming.listener import JStreamingQueryListener
from sqlalchemy.exc import SQLAlchemyError

from streaming.metrics import increment
from streaming.pipeline import DETECTION_WATERMARK
from streaming.plumbing.clock import now_ms
from streaming.plumbing.errors import first_line
from streaming.plumbing.resilience import Throttle
from streaming.source import messages_read, records_lost, topics_changed
from streaming.store import Store

__all__ = ["ProgressRecorder", "QueryStats"]

log = logging.getLogger(__name__)


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_400_YEARS_MS = 146_097 * 86_400_000  # the Gregorian calendar repeats every 400 years


def _watermark(observed: dict[str, Any]) -> int | None:
    """Detection's watermark as observed: none yet (no row, or only buckets that know none) is None."""
    ms = observed.get("ms")
    return int(ms) if ms is not None and int(ms) >= 0 else None


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
    """Listens to every query of the session; `stats[query name]` is updated per batch.

    A batch's progress is read as the one JSON text Spark makes of it (the format of
    `StreamingQuery.lastProgress`), not through pyspark's event object: that one is built field by
    field over py4j, and every Java collection iterated ends in an exception that pyspark's handler
    checks against ~15 exception classes, each lookup a failed class search through every jar on
    the classpath. That was 44% of a live job's JVM CPU at one batch a second (JFR).
    """

    def __init__(self, store: Store | None) -> None:
        self.store = store
        self.stats: dict[str, QueryStats] = {}
        self.changed = threading.Condition()
        self._store_failures = Throttle()

    @property
    def _jlistener(self):
        # pyspark's own wrapper of this listener for the JVM, with `onQueryProgress` replaced.
        from pyspark import SparkContext

        if not hasattr(self, "_jlistenerobj"):
            self._jlistenerobj = SparkContext._jvm.PythonStreamingQueryListenerWrapper(_ProgressAsJson(self))
        return self._jlistenerobj

    def onQueryStarted(self, event) -> None:
        log.info("query started", extra={"query": event.name, "id": str(event.id)})

    def onQueryProgress(self, event) -> None:
        """pyspark's event (a session that builds it itself, such as Spark Connect's)."""
        self.on_progress_json(event.progress.json)

    def on_progress_json(self, text: str) -> None:
        try:
            self.record(json.loads(text))
        except Exception:
            # A listener that raises is silently dropped by Spark: say why, keep the query running.
            log.exception("could not record query progress")

    def record(self, p: dict[str, Any]) -> None:
        """One batch's progress, as Spark's JSON has it (what a subclass extends)."""
        name = p.get("name") or p["id"]
        event_time = p.get("eventTime") or {}
        operators = p.get("stateOperators") or []
        state_rows = sum(op.get("numRowsTotal", 0) for op in operators)
        duration = int((p.get("durationMs") or {}).get("triggerExecution", 0))
        rows = messages_read(p)
        observed = (p.get("observedMetrics") or {}).get(DETECTION_WATERMARK)
        # Detection's own watermark after the batch (streaming/detect/bus_clock.py); Spark's (the largest
        # event time seen) only for a query without detection (a bench's raw reading).
        watermark_ms = _iso_ms(event_time.get("watermark")) if observed is None else _watermark(observed)
        # In the store first: whoever waits on the stats then finds the batch's row there too.
        if self.store is not None and rows + state_rows > 0:
            self._write_progress(p, name, rows, watermark_ms, duration, state_rows)
        with self.changed:
            stats = self.stats.setdefault(name, QueryStats())
            stats.batches += 1
            stats.input_rows += rows
            stats.last_batch_rows = rows
            stats.watermark_ms = watermark_ms
            batch_max = _iso_ms(event_time.get("max"))
            if batch_max is not None:
                stats.max_event_ms = max(stats.max_event_ms or batch_max, batch_max)
            stats.state_rows = state_rows
            stats.max_batch_ms = max(stats.max_batch_ms, duration)
            stats.busy_ms += duration
            self.changed.notify_all()
        # Spark's parts of the batch's time (latestOffset, queryPlanning, addBatch...): where a slow batch went.
        parts = {k: v for k, v in (p.get("durationMs") or {}).items() if k != "triggerExecution"}
        log.info("batch progress", extra={"query": name, "batch_id": p["batchId"], "rows": rows,
                                          "duration_ms": duration, "duration_parts_ms": parts,
                                          "watermark_ms": watermark_ms})
        self._count_bus_loss(p, name, rows)

    def _count_bus_loss(self, p: dict[str, Any], name: str, rows: int) -> None:
        """What the batch's Kafka sources planned and did not read: the bus had dropped it
        (streaming/source/bus_loss.py). Counted, and said in one line per batch that met it."""
        sources = p.get("sources") or []
        for source in sources:
            start, end = source.get("startOffset"), source.get("endOffset")
            self._say_topics_changed(start, end, p["batchId"], name)
            # The job's one source: the messages it read (its input rows may be parsed rows).
            read = rows if len(sources) == 1 else source.get("numInputRows", 0)
            lost = records_lost(start, end, read)
            if lost:
                increment("fleetwatch_bus_records_lost_total", lost)
                log.warning("bus data loss: records the job had not read are gone from the bus; reading goes on "
                            "from what it holds", extra={"query": name, "batch_id": p["batchId"], "lost": lost,
                                                         "source": source.get("description"),
                                                         "from": _text(start), "to": _text(end)})

    @staticmethod
    def _say_topics_changed(start: Any, end: Any, batch_id: int, name: str) -> None:
        """One line when a topic the job reads is deleted from the bus, one when it is back: the
        sources' own words are in Spark's JVM log or its Python workers, never in the job's log."""
        gone, back = topics_changed(start, end)
        for topic in gone:
            log.warning("bus topic deleted: the job reads nothing of it until it exists again (it does not "
                        "create it)", extra={"query": name, "batch_id": batch_id, "topic": topic})
        for topic in back:
            log.info("bus topic present again (or new): reading what it holds",
                     extra={"query": name, "batch_id": batch_id, "topic": topic})

    def _write_progress(self, p: dict[str, Any], name: str, rows: int, watermark_ms: int | None, duration: int,
                        state_rows: int) -> None:
        """One pipeline_progress row (`rows`: the messages the batch read); best effort: while the
        store is away, progress rows are lost (the batches' own writes wait for it), and the
        warning repeats at most twice a minute."""
        assert self.store is not None
        # Spark's rates count its input rows: scaled to the messages they stood for.
        per_row = rows / p["numInputRows"] if p.get("numInputRows") else 1.0
        try:
            self.store.write({"pipeline_progress": [{
                "query": name, "batch_id": p["batchId"], "recorded_at": now_ms(),
                "input_rows": rows,
                # Spark leaves a rate out of the JSON when it is not a finite number.
                "input_rows_per_s": _scaled(_finite(p.get("inputRowsPerSecond")), per_row),
                "processed_rows_per_s": _scaled(_finite(p.get("processedRowsPerSecond")), per_row),
                "batch_duration_ms": duration, "watermark_ms": watermark_ms,
                "state_rows": state_rows,
                "state_memory_bytes": sum(op.get("memoryUsedBytes", 0) for op in p.get("stateOperators") or []),
            }]})
        except SQLAlchemyError as exc:
            self._store_failures.warning(log, "query progress not recorded: store unavailable",
                                         query=name, batch_id=p["batchId"], error=first_line(exc, named=True))

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


class _ProgressAsJson(JStreamingQueryListener):
    """The JVM's side of the listener: a batch's progress goes over as one JSON text."""

    def onQueryProgress(self, jevent) -> None:
        self.pylistener.on_progress_json(jevent.progress().json())


def _text(offsets: Any) -> str | None:
    """A source's offsets as one text, as Spark prints them (the JSON holds them parsed)."""
    return offsets if offsets is None or isinstance(offsets, str) else json.dumps(offsets, separators=(",", ":"))


def _finite(value: float | None) -> float | None:
    if value is None or value != value or value in (float("inf"), float("-inf")):
        return None
    return float(value)


def _scaled(rate: float | None, factor: float) -> float | None:
    return None if rate is None else rate * factor
