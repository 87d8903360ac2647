"""The stateful detection stage: one DetectorProcessor per bucket of shards, its state and its output rows."""

from __future__ import annotations

import json
import marshal
import pickle
from collections import defaultdict
from collections.abc import Container, Iterator
from typing import Any

import pandas as pd
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

from streaming.alert import encode_output
from streaming.config import RuleBook
from streaming.contract import Event, event_to_dict
from streaming.detect import Position, ShardEngine, ShardOutput, dump_engine, load_engine
from streaming.pipeline.packing import unpack
from streaming.pipeline.parse import QUARANTINE_BUCKET, no_cycle_collection

__all__ = ["OUTPUT_SCHEMA", "DetectorProcessor"]

# One output row: an alert, a state snapshot for the store, a quarantined message, or the
# watermark a bucket was processed with.
OUTPUT_SCHEMA = StructType([
    StructField("kind", StringType()),
    StructField("key", StringType()),
    StructField("ts", LongType()),
    StructField("payload", StringType()),
])
_OUTPUT_COLUMNS = [f.name for f in OUTPUT_SCHEMA.fields]
# The state of one bucket: {shard: (next deadline or None, pickled ShardEngine)}, the timer
# registered for the bucket, and the bucket count it was written with.
_BUCKET_STATE = StructType([
    StructField("engines", BinaryType()),
    StructField("timer", LongType()),
    StructField("buckets", IntegerType()),
])


def _output_rows(out: ShardOutput) -> list[tuple[Any, ...]]:
    rows = [("alert", a.subject, a.event_ms, encode_output(a)) for a in out.alerts]
    rows += [("late", f"{src}:{pos}", event.ts, json.dumps(event_to_dict(event), separators=(",", ":")))
             for (src, pos), event in out.late]
    for kind, items in (("broker", out.brokers), ("cluster", out.clusters), ("target", out.targets),
                        ("transition", out.transitions), ("controller", out.controller_changes)):
        rows += [(kind, None, item.get("updated_ms") or item.get("ts"), json.dumps(item, separators=(",", ":")))
                 for item in items]
    return rows


def _watermark_row(watermark: int) -> tuple[Any, ...]:
    """The watermark detection ran with, for the sink: it tells when a reset state has caught up."""
    return ("watermark", None, watermark, None)


def _quarantine_rows(frame: pd.DataFrame) -> pd.DataFrame:
    rejected = [item for packed in frame["events"].tolist() for item in marshal.loads(packed)]
    return pd.DataFrame([("quarantine", f"{src}:{pos}", None,
                          json.dumps({"reason": reason, "detail": detail, "raw": raw}))
                         for src, pos, raw, reason, detail in rejected], columns=_OUTPUT_COLUMNS)


class DetectorProcessor(StatefulProcessor):
    """Runs the ShardEngines of one bucket of shards, kept in the state store, and wakes them
    with one event-time timer per bucket.

    Shards are grouped into a fixed number of buckets because each key costs the Python worker
    a fixed ~5 ms (Arrow to pandas, round trips to the JVM's state server): with one key per
    shard, that was most of a micro-batch at 1,000 clusters (bench/throughput.py).
    """

    def __init__(self, book: RuleBook, buckets: int) -> None:
        self.book = book
        self.buckets = buckets

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getValueState("bucket", _BUCKET_STATE)

    def _load(self) -> tuple[dict[str, tuple[int | None, bytes]], int | None]:
        stored = self.state.get()  # None for a new bucket: one round trip, not exists() + get()
        if stored is None:
            return {}, None
        engines, timer, buckets = stored
        if buckets != self.buckets:
            raise RuntimeError(f"the checkpoint's detection state has {buckets} buckets but spark.state_buckets "
                               f"is {self.buckets}: set it back to {buckets}, or start a new checkpoint")
        return pickle.loads(engines), timer

    def _save(self, engines: dict[str, tuple[int | None, bytes]], registered: int | None) -> None:
        deadlines = [deadline for deadline, _ in engines.values() if deadline is not None]
        # Spark fires a timer once the watermark reaches it; the engines' timers fire once the
        # watermark has passed them, hence the extra millisecond.
        timer = min(deadlines) + 1 if deadlines else None
        if timer != registered:  # every timer call is a round trip: only move it when it moved
            if registered is not None:
                self.handle.deleteTimer(registered)
            if timer is not None:
                self.handle.registerTimer(timer)
        if engines:
            self.state.update((pickle.dumps(engines, protocol=pickle.HIGHEST_PROTOCOL), timer, self.buckets))
        else:  # every shard of the bucket was forgotten (state TTL): so is the bucket's row
            self.state.clear()

    def _step(self, engines: dict[str, tuple[int | None, bytes]], shard: str,
              events: list[tuple[Position, Event]] | None, watermark: int) -> list[tuple[Any, ...]]:
        """Process a shard's events (or, with None, only its due timers) and store the engine back."""
        stored = engines.get(shard)
        engine = load_engine(stored[1]) if stored is not None else ShardEngine(shard)
        out = engine.advance(watermark, self.book) if events is None else engine.process(events, watermark, self.book)
        if engine.forgotten(watermark, self.book):
            engines.pop(shard, None)  # quiet for longer than the state TTL, nothing open
        else:
            engines[shard] = (engine.next_deadline(self.book), dump_engine(engine))
        return _output_rows(out)

    def _advance_due(self, engines: dict[str, tuple[int | None, bytes]], watermark: int,
                     skip: Container[str] = ()) -> list[tuple[Any, ...]]:
        due = [shard for shard, (deadline, _) in engines.items()
               if deadline is not None and deadline < watermark and shard not in skip]
        return [row for shard in due for row in self._step(engines, shard, None, watermark)]

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        (bucket,) = key
        if bucket == QUARANTINE_BUCKET:
            yield from (_quarantine_rows(frame) for frame in rows)
            return
        frames = list(rows)
        with no_cycle_collection():
            result = self._detect(frames, timerValues.getCurrentWatermarkInMs())
        yield result

    def _detect(self, frames: list[pd.DataFrame], watermark: int) -> pd.DataFrame:
        # A function of its own, so that its events are gone when the collector comes back.
        by_shard: dict[str, list[tuple[Position, Event]]] = defaultdict(list)
        for frame in frames:
            for packed in frame["events"].tolist():
                for shard, src, pos, event in unpack(packed):
                    by_shard[shard].append(((src, pos), event))
        engines, registered = self._load()
        output = [row for shard, events in by_shard.items() for row in self._step(engines, shard, events, watermark)]
        # The bucket's timer is also due for its other shards whose deadline the watermark passed.
        output += self._advance_due(engines, watermark, skip=by_shard)
        self._save(engines, registered)
        output.append(_watermark_row(watermark))
        return pd.DataFrame(output, columns=_OUTPUT_COLUMNS)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        engines, _ = self._load()
        watermark = timerValues.getCurrentWatermarkInMs()
        output = self._advance_due(engines, watermark)
        self._save(engines, None)  # Spark deletes the expired timer after this call
        output.append(_watermark_row(watermark))
        yield pd.DataFrame(output, columns=_OUTPUT_COLUMNS)

    def close(self) -> None:
        pass
