"""The stateful detection stages: the engines of each pass per bucket of shards, their state and their output rows.

- `DetectorProcessor` (first pass): the cluster and target shards over the parsed events. Its
  rows (`HANDOFF_SCHEMA`) carry, per bucket and micro-batch, its output rows packed, and the
  hand-offs for each bucket of the second pass.
- `HolderProcessor` (second pass): the address and cluster-id shards over the hand-offs; it
  passes the first pass's output rows on, with its own alerts (`OUTPUT_SCHEMA`).
"""

from __future__ import annotations

import marshal
import pickle
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
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

from streaming.config import RuleBook
from streaming.detect import (
    EVERY_SHARD,
    BusClock,
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
from streaming.records.contract import event_to_dict
from streaming.records.job_output import (
    ClockReading,
    Kind,
    LateEvent,
    Refused,
    Row,
    StateRow,
    alert_row,
    compact_json,
    history_row,
    mark_row,
)

__all__ = ["HANDOFF_SCHEMA", "HANDOFF_TIME", "OUTPUT_SCHEMA", "DetectorProcessor", "HolderProcessor"]

# One output row (`streaming.records.job_output.Row`: kind, key, ts, payload): a fact of the micro-batch, of a
# kind of streaming/records/job_output.py, which says how each is spelled.
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
# past Spark's watermark, so that none is late (what a row carries can be older: an alert a
# deadline fired).
HANDOFF_TIME = "handoff_time"
HANDOFF_SCHEMA = StructType([
    StructField("bucket", IntegerType()),
    StructField(HANDOFF_TIME, TimestampType()),
    StructField("kind", StringType()),
    StructField("data", BinaryType()),
])
_HANDOFF_COLUMNS = [f.name for f in HANDOFF_SCHEMA.fields]
# The state of one bucket: {shard: (next deadline or None, pickled engine)}, a timer (written by
# versions that woke the bucket with Spark's event-time timers; now always null, see
# `_BucketsOfShards`), and the bucket count it was written with. Beside the shards, under keys that
# are no shard's name (each has a prefix with a colon), as (None, pickled value): the first pass's
# `ReadPositions` (`_POSITIONS`, builtins; a bucket without shards keeps none: a shard new there has
# no broker session a gap before it could restart), its `BusClock` (`_CLOCK`, builtins: detection's
# watermark; a bucket without shards keeps none either: its next shard's first events are late for
# nothing, as in one batch, and its clock starts again from what it reads, which never puts it ahead
# of the other buckets') and the events it holds back (`_HELD`: see `DetectorProcessor`). A state
# written before has none of them.
_BUCKET_STATE = StructType([
    StructField("engines", BinaryType()),
    StructField("timer", LongType()),
    StructField("buckets", IntegerType()),
])
_Engines = dict[str, tuple[int | None, bytes]]
_Items = dict[str, list[tuple[Position, Any]]]  # a shard's events (or hand-offs), each at its position
_POSITIONS = "bus-positions"
_CLOCK = "bus-clock"
_HELD = "held-events"
# The watermark a hand-off is checked against: none is late.
_NEVER_LATE = -(2**62)


@dataclass
class _Bucket:
    """One bucket's state, as `_BucketsOfShards` loads it (`registered`: a timer an older version left)."""

    engines: _Engines = field(default_factory=dict)
    registered: int | None = None
    positions: ReadPositions = field(default_factory=ReadPositions)
    clock: BusClock = field(default_factory=BusClock)
    held: list[tuple[str, Position, Any]] = field(default_factory=list)


def _output_rows(out: ShardOutput) -> list[Row]:
    rows = [alert_row(a) for a in out.alerts]
    rows += [LateEvent(f"{src}:{pos}", event.ts, compact_json(event_to_dict(event))).output()
             for (src, pos), event in out.late]
    for kind, snapshots in ((Kind.BROKER, out.brokers), (Kind.CLUSTER, out.clusters), (Kind.TARGET, out.targets)):
        rows += [StateRow.of(kind, snapshot).output() for snapshot in snapshots]
    rows += [history_row(Kind.TRANSITION, item) for item in out.transitions]
    rows += [history_row(Kind.CONTROLLER, item) for item in out.controller_changes]
    return rows


def _rows_of(outputs: list[ShardOutput]) -> list[Row]:
    return [row for out in outputs for row in _output_rows(out)]


def _quarantine_rows(frame: pd.DataFrame) -> list[Row]:
    rejected = [item for packed in frame["events"].tolist() for item in marshal.loads(packed)]
    return [Refused(f"{src}:{pos}", reason, detail, raw, source).output()
            for src, pos, raw, reason, detail, source in rejected]


def _source_clock_rows(frame: pd.DataFrame) -> list[Row]:
    readings = [item for packed in frame["events"].tolist() for item in marshal.loads(packed)]
    return [ClockReading(*reading).output() for reading in readings]


class _BucketsOfShards(StatefulProcessor):
    """Runs the engines of one bucket of shards, kept in the state store.

    Shards are grouped into a fixed number of buckets because each key costs the Python worker
    a fixed ~5 ms (Arrow to pandas, round trips to the JVM's state server): with one key per
    shard, that was most of a micro-batch at 1,000 clusters (bench/throughput.py).

    Time is detection's own watermark (`BusClock`, streaming/detect/bus_clock.py), not Spark's:
    a micro-batch's events are checked for lateness against the watermark before it, then every
    deadline the watermark after it passed falls due, in the same batch. Every bucket of both
    passes gets rows in every micro-batch that read anything (the parse stage sends each bucket the
    batch's reads; each bucket of the first pass hands its rows to the same bucket of the second),
    and the watermark moves only with what is read, so no Spark timer is needed: a timer of Spark's
    would fire by Spark's watermark, ahead of detection's while a capped backlog is read.
    """

    def __init__(self, book: RuleBook, buckets: int) -> None:
        self.book = book
        self.buckets = buckets

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getValueState("bucket", _BUCKET_STATE)

    def _load(self) -> _Bucket:
        stored = self.state.get()  # None for a new bucket: one round trip, not exists() + get()
        if stored is None:
            return _Bucket()
        engines, timer, buckets = stored
        if buckets != self.buckets:
            raise RuntimeError(f"the checkpoint's detection state has {buckets} buckets but spark.state_buckets "
                               f"is {self.buckets}: set it back to {buckets}, or start a new checkpoint")
        loaded: _Engines = pickle.loads(engines)
        positions, clock, held = (loaded.pop(name, None) for name in (_POSITIONS, _CLOCK, _HELD))
        return _Bucket(loaded, timer, ReadPositions(None if positions is None else pickle.loads(positions[1])),
                       BusClock.load(None if clock is None else pickle.loads(clock[1])),
                       [] if held is None else pickle.loads(held[1]))

    def _save(self, bucket: _Bucket, *, clock: bool) -> None:
        """Store the bucket back (with its clock, in the first pass)."""
        if bucket.registered is not None:  # an older version's timer (every timer call is a round trip)
            self.handle.deleteTimer(bucket.registered)
        kept = dict(bucket.engines)
        if clock and (bucket.engines or bucket.held):
            kept[_CLOCK] = (None, pickle.dumps(bucket.clock.dump(), protocol=pickle.HIGHEST_PROTOCOL))
        if bucket.held:
            kept[_HELD] = (None, pickle.dumps(bucket.held, protocol=pickle.HIGHEST_PROTOCOL))
        if bucket.engines and bucket.positions.at:
            kept[_POSITIONS] = (None, pickle.dumps(bucket.positions.at, protocol=pickle.HIGHEST_PROTOCOL))
        if kept:
            self.state.update((pickle.dumps(kept, protocol=pickle.HIGHEST_PROTOCOL), None, self.buckets))
        else:  # every shard of the bucket was forgotten (state TTL): so is the bucket's row
            self.state.clear()

    def _step(self, engines: _Engines, shard: str, items: list[tuple[Position, Any]] | None,
              watermark: int) -> ShardOutput:
        """Process a shard's events or hand-offs (or, with None, only its due deadlines) and store the engine back."""
        stored = engines.get(shard)
        engine = load_engine(stored[1]) if stored is not None else engine_for(shard)
        out = engine.advance(watermark, self.book) if items is None else engine.process(items, watermark, self.book)
        if engine.forgotten(watermark, self.book):
            engines.pop(shard, None)  # quiet for longer than the state TTL, nothing open
        else:
            engines[shard] = (engine.next_deadline(self.book), dump_engine(engine))
        return out

    def _run(self, engines: _Engines, by_shard: _Items, before: int, after: int) -> list[ShardOutput]:
        """The bucket's shards with items, late against `before` (the watermark before the micro-batch),
        then every shard whose deadline `after` (the watermark after it) passed."""
        outputs = [self._step(engines, shard, items, before) for shard, items in by_shard.items()]
        due = [shard for shard, (deadline, _) in engines.items() if deadline is not None and deadline < after]
        return outputs + [self._step(engines, shard, None, after) for shard in due]

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        # Only a timer a version before detection's own watermark registered (Spark deletes it after
        # this call): what it would have woken falls due with the bucket's next rows, by that watermark.
        yield from ()

    def close(self) -> None:
        pass


class DetectorProcessor(_BucketsOfShards):
    """The first pass: the cluster and target shards of a bucket over its parsed events.

    `cap`: the job's `spark.max_records_per_batch`, which tells its clock whether a micro-batch may
    have been cut by it (streaming/detect/bus_clock.py). After such a batch, the bucket applies only
    the events before the new watermark and holds the others back, in its state, for a later batch:
    a capped batch reads some partitions further than others, and an event applied ahead of one an
    unread partition still holds would decide a deadline out of event-time order. So every event is
    applied in the order of reading everything at once. (After a batch that read every partition to
    its end, every event is applied, as it comes.)"""

    def __init__(self, book: RuleBook, buckets: int, cap: int | None) -> None:
        super().__init__(book, buckets)
        self.cap = cap

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        (bucket,) = key
        spark_watermark = timerValues.getCurrentWatermarkInMs()
        if bucket in (QUARANTINE_BUCKET, SOURCE_CLOCK_BUCKET):
            to_rows = _quarantine_rows if bucket == QUARANTINE_BUCKET else _source_clock_rows
            yield self._handing_on(0, [row for frame in rows for row in to_rows(frame)], [], spark_watermark)
            return
        frames = list(rows)
        with no_cycle_collection():
            result = self._detect(bucket, frames, spark_watermark)
        yield result

    def _detect(self, bucket: int, frames: list[pd.DataFrame], spark_watermark: int) -> pd.DataFrame:
        # A function of its own, so that its events are gone when the collector comes back.
        state = self._load()
        items: list[tuple[str, Position, Any]] = state.held
        earliest: int | None = None
        reads: list[Run] = []
        for frame in frames:
            for packed, runs in zip(frame["events"].tolist(), frame["reads"].tolist(), strict=True):
                if runs is not None:
                    reads += map(Run._make, marshal.loads(runs))
                if packed is None:  # the chunk had none of the bucket's events, only its reads
                    continue
                for shard, src, pos, event in unpack(packed):
                    items.append((shard, (src, pos), event))
                    earliest = event.ts if earliest is None else min(earliest, event.ts)
        # A bucket new, or without shards before, or of a state written before the clock: nothing is late for
        # it (as in one batch), and its clock starts from what this batch read (never ahead of the others').
        before = _NEVER_LATE if state.clock.watermark is None else state.clock.watermark
        capped = state.clock.advance(reads, self.cap, self.book.defaults.allowed_lateness_ms)
        after = _NEVER_LATE if state.clock.watermark is None else state.clock.watermark
        # Each gap in the reads goes to every shard of the bucket, which knows whether its heartbeats travel there.
        items += [(EVERY_SHARD, (gap.source, gap.offset), gap) for gap in state.positions.advance(reads)]
        by_shard: _Items = defaultdict(list)
        every: list[tuple[Position, Any]] = []  # what goes to every shard of the bucket
        state.held = []
        for shard, position, event in items:
            if capped and event.ts >= after:
                state.held.append((shard, position, event))
            elif shard == EVERY_SHARD:
                every.append((position, event))
            else:
                by_shard[shard].append((position, event))
        for shard in dict.fromkeys([*state.engines, *by_shard]) if every else ():
            by_shard[shard] += every
        outputs = self._run(state.engines, by_shard, before, after)
        self._save(state, clock=True)
        rows = _rows_of(outputs) + ([] if earliest is None else [mark_row(Kind.EARLIEST_EVENT, earliest)])
        # Detection's watermark after the batch: the second pass's, and the sink's (when a reset state caught up).
        rows.append(mark_row(Kind.WATERMARK, after))
        return self._handing_on(bucket, rows, [change for out in outputs for change in out.handoffs],
                                spark_watermark)

    def _handing_on(self, bucket: int, rows: list[Row], handoffs: list[Handoff],
                    spark_watermark: int) -> pd.DataFrame:
        """The rows for the second pass: this bucket's output rows, to the same bucket there, and
        the hand-offs, each to its shard's bucket."""
        by_bucket: dict[int, list[Handoff]] = defaultdict(list)
        for change in handoffs:
            by_bucket[bucket_of(shard_of_handoff(change), self.buckets)].append(change)
        out = [(bucket, "rows", marshal.dumps(rows))]
        out += [(b, "handoffs", pickle.dumps(changes, protocol=pickle.HIGHEST_PROTOCOL))
                for b, changes in by_bucket.items()]
        # Just past Spark's watermark, which Spark checks rows between stateful operators against.
        at = pd.Timestamp(spark_watermark + 1, unit="ms")
        return pd.DataFrame([(b, at, kind, data) for b, kind, data in out], columns=_HANDOFF_COLUMNS)


class HolderProcessor(_BucketsOfShards):
    """The second pass: the address and cluster-id shards of a bucket over the hand-offs to them;
    the first pass's output rows go through. Its watermark is the first pass's, which the rows of
    the first pass's bucket of the same number carry (`Kind.WATERMARK`). It keeps no clock: a
    hand-off is never late (the first pass quarantined the late events), and every deadline the
    watermark before the batch passed fell due in the batch before."""

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        output: list[Row] = []
        by_shard: dict[str, list[tuple[Position, Any]]] = defaultdict(list)
        for frame in rows:
            for kind, data in zip(frame["kind"].tolist(), frame["data"].tolist(), strict=True):
                if kind == "rows":
                    output += marshal.loads(data)
                else:
                    for change in pickle.loads(data):
                        by_shard[shard_of_handoff(change)].append(((), change))
        watermarks = [row[2] for row in output if row[0] == Kind.WATERMARK]
        if watermarks or by_shard:
            state = self._load()
            after = max(watermarks, default=_NEVER_LATE)
            due = [shard for shard, (deadline, _) in state.engines.items() if deadline is not None and deadline < after]
            if by_shard or due or state.registered is not None:
                output += _rows_of(self._run(state.engines, by_shard, _NEVER_LATE, after))
                self._save(state, clock=False)
        yield pd.DataFrame(output, columns=_OUTPUT_COLUMNS)
