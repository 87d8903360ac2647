"""The stateful detection stages: the engines of each pass per bucket of shards, their state and their output rows.

- `DetectorProcessor` (first pass): the cluster and target shards over the parsed events. Its
  rows (`HANDOFF_SCHEMA`) carry, per bucket and micro-batch, its output rows packed, and the
  hand-offs for each bucket of the second pass.
- `HolderProcessor` (second pass): the address and cluster-id shards over the hand-offs; it
  passes the first pass's output rows on, with its own alerts (`OUTPUT_SCHEMA`).
"""

from __future__ import annotations

import json
import marshal
import pickle
from collections import defaultdict
from collections.abc import Container, Iterator
from typing import Any

import pandas as pd
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from streaming.alert import encode_output
from streaming.config import RuleBook
from streaming.contract import event_to_dict
from streaming.detect import (
    Handoff,
    Position,
    ReadPositions,
    Run,
    ShardOutput,
    dump_engine,
    engine_for,
    load_engine,
    shard_of_handoff,
)
from streaming.pipeline.packing import unpack
from streaming.pipeline.parse import QUARANTINE_BUCKET, SOURCE_CLOCK_BUCKET, bucket_of, no_cycle_collection
from streaming.sinks import StateRow, compact_json

__all__ = ["HANDOFF_SCHEMA", "HANDOFF_TIME", "OUTPUT_SCHEMA", "DetectorProcessor", "HolderProcessor"]

# One output row: an alert, a state snapshot for the store (`StateRow.output`: key the
# snapshot's identity in its table) or a history row, a quarantined message, a source's
# clock reading (kind "source_clock": key the source, payload its lead, events and refusals), the
# watermark a bucket was processed with, or the event time of the oldest event a bucket read in
# the micro-batch (kind "earliest_event": how far back the telemetry a reset state reads goes).
OUTPUT_SCHEMA = StructType([
    StructField("kind", StringType()),
    StructField("key", StringType()),
    StructField("ts", LongType()),
    StructField("payload", StringType()),
])
_OUTPUT_COLUMNS = [f.name for f in OUTPUT_SCHEMA.fields]
# Between the passes: to the second pass's `bucket`, the first pass's output rows (kind "rows":
# marshal-ed OUTPUT_SCHEMA tuples) or hand-offs (kind "handoffs": pickled `Handoff`s).
# `HANDOFF_TIME` is the event time Spark checks rows between stateful operators against: just
# past the watermark, so that none is late (what a row carries can be older: an alert a timer
# fired at its deadline).
HANDOFF_TIME = "handoff_time"
HANDOFF_SCHEMA = StructType([
    StructField("bucket", IntegerType()),
    StructField(HANDOFF_TIME, TimestampType()),
    StructField("kind", StringType()),
    StructField("data", BinaryType()),
])
_HANDOFF_COLUMNS = [f.name for f in HANDOFF_SCHEMA.fields]
# The state of one bucket: {shard: (next deadline or None, pickled engine)}, the timer
# registered for the bucket, and the bucket count it was written with. The first pass also keeps
# its `ReadPositions` in the engines' dict under `_POSITIONS` (no shard's name: each has a prefix
# with a colon), as (None, its `at` pickled: builtins only, no class to keep loadable); a state
# written before has none, and starts following the offsets. A
# bucket without shards keeps none either (its row goes, as before): a shard new there has no
# broker session a gap before it could restart.
_BUCKET_STATE = StructType([
    StructField("engines", BinaryType()),
    StructField("timer", LongType()),
    StructField("buckets", IntegerType()),
])
_Engines = dict[str, tuple[int | None, bytes]]
_POSITIONS = "bus-positions"


def _output_rows(out: ShardOutput) -> list[tuple[Any, ...]]:
    rows = [("alert", a.subject, a.event_ms, encode_output(a)) for a in out.alerts]
    rows += [("late", f"{src}:{pos}", event.ts, compact_json(event_to_dict(event)))
             for (src, pos), event in out.late]
    for kind, snapshots in (("broker", out.brokers), ("cluster", out.clusters), ("target", out.targets)):
        rows += [StateRow.of(kind, snapshot).output() for snapshot in snapshots]
    # The histories: each row carries its own time, `ts`.
    for kind, items in (("transition", out.transitions), ("controller", out.controller_changes)):
        rows += [(kind, None, item["ts"], compact_json(item)) for item in items]
    return rows


def _rows_of(outputs: list[ShardOutput]) -> list[tuple[Any, ...]]:
    return [row for out in outputs for row in _output_rows(out)]


def _watermark_row(watermark: int) -> tuple[Any, ...]:
    """The watermark detection ran with, for the sink: it tells when a reset state has caught up."""
    return ("watermark", None, watermark, None)


def _quarantine_rows(frame: pd.DataFrame) -> list[tuple[Any, ...]]:
    rejected = [item for packed in frame["events"].tolist() for item in marshal.loads(packed)]
    return [("quarantine", f"{src}:{pos}", None,
             json.dumps({"reason": reason, "detail": detail, "raw": raw, "source": source}))
            for src, pos, raw, reason, detail, source in rejected]


def _source_clock_rows(frame: pd.DataFrame) -> list[tuple[Any, ...]]:
    readings = [item for packed in frame["events"].tolist() for item in marshal.loads(packed)]
    return [("source_clock", source, None, json.dumps({"lead_ms": lead, "events": n, "ahead": ahead}))
            for source, lead, n, ahead in readings]


class _BucketsOfShards(StatefulProcessor):
    """Runs the engines of one bucket of shards, kept in the state store, and wakes them with one
    event-time timer per bucket.

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

    def _load(self) -> tuple[_Engines, int | None, ReadPositions]:
        stored = self.state.get()  # None for a new bucket: one round trip, not exists() + get()
        if stored is None:
            return {}, None, ReadPositions()
        engines, timer, buckets = stored
        if buckets != self.buckets:
            raise RuntimeError(f"the checkpoint's detection state has {buckets} buckets but spark.state_buckets "
                               f"is {self.buckets}: set it back to {buckets}, or start a new checkpoint")
        loaded: _Engines = pickle.loads(engines)
        positions = loaded.pop(_POSITIONS, None)
        return loaded, timer, ReadPositions(None if positions is None else pickle.loads(positions[1]))

    def _save(self, engines: _Engines, registered: int | None, positions: ReadPositions) -> None:
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
            if positions.at:
                engines = {**engines, _POSITIONS: (None, pickle.dumps(positions.at, protocol=pickle.HIGHEST_PROTOCOL))}
            self.state.update((pickle.dumps(engines, protocol=pickle.HIGHEST_PROTOCOL), timer, self.buckets))
        else:  # every shard of the bucket was forgotten (state TTL): so is the bucket's row
            self.state.clear()

    def _step(self, engines: _Engines, shard: str, items: list[tuple[Position, Any]] | None,
              watermark: int) -> ShardOutput:
        """Process a shard's events or hand-offs (or, with None, only its due timers) and store the engine back."""
        stored = engines.get(shard)
        engine = load_engine(stored[1]) if stored is not None else engine_for(shard)
        out = engine.advance(watermark, self.book) if items is None else engine.process(items, watermark, self.book)
        if engine.forgotten(watermark, self.book):
            engines.pop(shard, None)  # quiet for longer than the state TTL, nothing open
        else:
            engines[shard] = (engine.next_deadline(self.book), dump_engine(engine))
        return out

    def _run(self, by_shard: dict[str, list[tuple[Position, Any]]], watermark: int,
             reads: list[Run] | None = None) -> list[ShardOutput]:
        """The bucket's shards with items, then those whose deadline the watermark passed. `reads`:
        the micro-batch's runs of bus offsets (first pass); each gap before them goes to every
        shard of the bucket, which knows whether its heartbeats travel there."""
        engines, registered, positions = self._load()
        if reads:
            gaps = positions.advance(reads)
            for shard in dict.fromkeys([*engines, *by_shard]) if gaps else ():
                by_shard[shard] += [((gap.source, gap.offset), gap) for gap in gaps]
        outputs = [self._step(engines, shard, items, watermark) for shard, items in by_shard.items()]
        outputs += self._advance_due(engines, watermark, skip=by_shard)
        self._save(engines, registered, positions)
        return outputs

    def _advance_due(self, engines: _Engines, watermark: int, skip: Container[str] = ()) -> list[ShardOutput]:
        due = [shard for shard, (deadline, _) in engines.items()
               if deadline is not None and deadline < watermark and shard not in skip]
        return [self._step(engines, shard, None, watermark) for shard in due]

    def _expired(self, watermark: int) -> list[ShardOutput]:
        engines, _, positions = self._load()
        outputs = self._advance_due(engines, watermark)
        self._save(engines, None, positions)  # Spark deletes the expired timer after this call
        return outputs

    def close(self) -> None:
        pass


class DetectorProcessor(_BucketsOfShards):
    """The first pass: the cluster and target shards of a bucket over its parsed events."""

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        (bucket,) = key
        watermark = timerValues.getCurrentWatermarkInMs()
        if bucket in (QUARANTINE_BUCKET, SOURCE_CLOCK_BUCKET):
            to_rows = _quarantine_rows if bucket == QUARANTINE_BUCKET else _source_clock_rows
            yield self._handing_on(0, [row for frame in rows for row in to_rows(frame)], [], watermark)
            return
        frames = list(rows)
        with no_cycle_collection():
            result = self._detect(bucket, frames, watermark)
        yield result

    def _detect(self, bucket: int, frames: list[pd.DataFrame], watermark: int) -> pd.DataFrame:
        # A function of its own, so that its events are gone when the collector comes back.
        by_shard: dict[str, list[tuple[Position, Any]]] = defaultdict(list)
        earliest: int | None = None
        reads: list[Run] = []
        for frame in frames:
            for packed, runs in zip(frame["events"].tolist(), frame["reads"].tolist(), strict=True):
                if runs is not None:
                    reads += marshal.loads(runs)
                if packed is None:  # the chunk had none of the bucket's events, only its reads
                    continue
                for shard, src, pos, event in unpack(packed):
                    by_shard[shard].append(((src, pos), event))
                    earliest = event.ts if earliest is None else min(earliest, event.ts)
        extra = [] if earliest is None else [("earliest_event", None, earliest, None)]
        return self._passed_on(bucket, self._run(by_shard, watermark, reads), watermark, extra)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        (bucket,) = key
        watermark = timerValues.getCurrentWatermarkInMs()
        yield self._passed_on(bucket, self._expired(watermark), watermark)

    def _passed_on(self, bucket: int, outputs: list[ShardOutput], watermark: int,
                   extra: list[tuple[Any, ...]] | None = None) -> pd.DataFrame:
        """What the bucket's shards produced, with the watermark they ran with (and `extra` rows),
        for the second pass."""
        rows = _rows_of(outputs) + (extra or [])
        rows.append(_watermark_row(watermark))
        return self._handing_on(bucket, rows, [change for out in outputs for change in out.handoffs], watermark)

    def _handing_on(self, bucket: int, rows: list[tuple[Any, ...]], handoffs: list[Handoff],
                    watermark: int) -> pd.DataFrame:
        """The rows for the second pass: this bucket's output rows, to the same bucket there, and
        the hand-offs, each to its shard's bucket."""
        by_bucket: dict[int, list[Handoff]] = defaultdict(list)
        for change in handoffs:
            by_bucket[bucket_of(shard_of_handoff(change), self.buckets)].append(change)
        out = [(bucket, "rows", marshal.dumps(rows))]
        out += [(b, "handoffs", pickle.dumps(changes, protocol=pickle.HIGHEST_PROTOCOL))
                for b, changes in by_bucket.items()]
        at = pd.Timestamp(watermark + 1, unit="ms")
        return pd.DataFrame([(b, at, kind, data) for b, kind, data in out], columns=_HANDOFF_COLUMNS)


class HolderProcessor(_BucketsOfShards):
    """The second pass: the address and cluster-id shards of a bucket over the hand-offs to them;
    the first pass's output rows go through."""

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        output: list[tuple[Any, ...]] = []
        by_shard: dict[str, list[tuple[Position, Any]]] = defaultdict(list)
        for frame in rows:
            for kind, data in zip(frame["kind"].tolist(), frame["data"].tolist(), strict=True):
                if kind == "rows":
                    output += marshal.loads(data)
                else:
                    for change in pickle.loads(data):
                        by_shard[shard_of_handoff(change)].append(((), change))
        if by_shard:
            output += _rows_of(self._run(by_shard, timerValues.getCurrentWatermarkInMs()))
        yield pd.DataFrame(output, columns=_OUTPUT_COLUMNS)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        yield pd.DataFrame(_rows_of(self._expired(timerValues.getCurrentWatermarkInMs())), columns=_OUTPUT_COLUMNS)
