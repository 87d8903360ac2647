"""Detection's stateful operator: the first pass's engines per bucket of shards, their state and
their output rows.

`DetectorProcessor` runs the cluster and target shards of a bucket over its parsed events. Its
rows (`OUTPUT_SCHEMA`) are the job's output rows, with the bucket's watermark and, one row per
bucket of the second pass, the hand-offs to it (`Kind.HANDOFFS`): the job's driver runs the
second pass over them (streaming/detect/second_pass.py) before the sink reads the batch.
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
)

from streaming.config import RuleBook
from streaming.detect import (
    EVERY_SHARD,
    NEVER_LATE,
    BucketEngines,
    BusClock,
    Handoff,
    Position,
    ReadPositions,
    Run,
    ShardItems,
    handoff_rows,
    output_rows,
    run_bucket,
    shard_of_handoff,
)
from streaming.pipeline.bucket_keys import bucket_count_changed, bucket_of_key
from streaming.pipeline.packing import unpack
from streaming.pipeline.parse import QUARANTINE_BUCKET, SOURCE_CLOCK_BUCKET, bucket_of
from streaming.plumbing.cycles import no_cycle_collection
from streaming.records.job_output import ClockReading, Kind, Refused, Row, mark_row

__all__ = ["OUTPUT_SCHEMA", "DetectorProcessor"]

# One output row (`streaming.records.job_output.Row`: kind, key, ts, payload): a fact of the micro-batch, of a
# kind of streaming/records/job_output.py, which says how each is spelled.
OUTPUT_SCHEMA = StructType([
    StructField("kind", StringType()),
    StructField("key", StringType()),
    StructField("ts", LongType()),
    StructField("payload", StringType()),
])
_OUTPUT_COLUMNS = [f.name for f in OUTPUT_SCHEMA.fields]
# The state of one bucket: {shard: (next deadline or None, pickled engine)}, a timer (written by
# versions that woke the bucket with Spark's event-time timers; now always null, see
# `DetectorProcessor`), and the bucket count it was written with. Beside the shards, under keys that
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
_POSITIONS = "bus-positions"
_CLOCK = "bus-clock"
_HELD = "held-events"


@dataclass
class _Bucket:
    """One bucket's state, as `DetectorProcessor` loads it (`stored`: the store has a row of it; `registered`:
    a timer an older version left)."""

    stored: bool = False
    engines: BucketEngines = field(default_factory=dict)
    registered: int | None = None
    positions: ReadPositions = field(default_factory=ReadPositions)
    clock: BusClock = field(default_factory=BusClock)
    held: list[tuple[str, Position, Any]] = field(default_factory=list)


def _quarantine_rows(frame: pd.DataFrame) -> list[Row]:
    rejected = [item for packed in frame["events"].tolist() for item in marshal.loads(packed)]
    return [Refused(f"{src}:{pos}", reason, detail, raw, source).output()
            for src, pos, raw, reason, detail, source in rejected]


def _source_clock_rows(frame: pd.DataFrame) -> list[Row]:
    readings = [item for packed in frame["events"].tolist() for item in marshal.loads(packed)]
    return [ClockReading(*reading).output() for reading in readings]


class DetectorProcessor(StatefulProcessor):
    """The first pass: the cluster and target shards of a bucket over its parsed events, kept in the state store.

    Shards are grouped into a fixed number of buckets because each key costs the Python worker
    a fixed ~5 ms (Arrow to pandas, round trips to the JVM's state server): with one key per
    shard, that was most of a micro-batch at 1,000 clusters (bench/throughput.py).

    Time is detection's own watermark (`BusClock`, streaming/detect/bus_clock.py), not Spark's:
    a micro-batch's events are checked for lateness against the watermark before it, then every
    deadline the watermark after it passed falls due, in the same batch. Every bucket gets rows in
    every micro-batch that read anything (the parse stage sends each bucket the batch's reads), and
    writes its watermark after it, which the second pass's bucket of the same number runs by; the
    watermark moves only with what is read, so no Spark timer is needed: a timer of Spark's would
    fire by Spark's watermark, ahead of detection's while a capped backlog is read.

    `cap`: the job's `spark.max_records_per_batch`, which tells its clock whether a micro-batch may
    have been cut by it (streaming/detect/bus_clock.py). After such a batch, the bucket applies only
    the events before the new watermark and holds the others back, in its state, for a later batch:
    a capped batch reads some partitions further than others, and an event applied ahead of one an
    unread partition still holds would decide a deadline out of event-time order. So every event is
    applied in the order of reading everything at once. (After a batch that read every partition to
    its end, every event is applied, as it comes.)"""

    def __init__(self, book: RuleBook, buckets: int, cap: int | None) -> None:
        self.book = book
        self.buckets = buckets
        self.cap = cap

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getValueState("bucket", _BUCKET_STATE)

    def _load(self) -> _Bucket:
        stored = self.state.get()  # None for a new bucket: one round trip, not exists() + get()
        if stored is None:
            return _Bucket()
        engines, timer, buckets = stored
        if buckets != self.buckets:
            raise RuntimeError(bucket_count_changed(buckets, self.buckets))
        loaded: BucketEngines = pickle.loads(engines)
        positions, clock, held = (loaded.pop(name, None) for name in (_POSITIONS, _CLOCK, _HELD))
        return _Bucket(True, loaded, timer, ReadPositions(None if positions is None else pickle.loads(positions[1])),
                       BusClock.load(None if clock is None else pickle.loads(clock[1])),
                       [] if held is None else pickle.loads(held[1]))

    def _save(self, bucket: _Bucket) -> None:
        if bucket.registered is not None:  # an older version's timer (every timer call is a round trip)
            self.handle.deleteTimer(bucket.registered)
        kept = dict(bucket.engines)
        if bucket.engines or bucket.held:
            kept[_CLOCK] = (None, pickle.dumps(bucket.clock.dump(), protocol=pickle.HIGHEST_PROTOCOL))
        if bucket.held:
            kept[_HELD] = (None, pickle.dumps(bucket.held, protocol=pickle.HIGHEST_PROTOCOL))
        if bucket.engines and bucket.positions.at:
            kept[_POSITIONS] = (None, pickle.dumps(bucket.positions.at, protocol=pickle.HIGHEST_PROTOCOL))
        if kept:
            self.state.update((pickle.dumps(kept, protocol=pickle.HIGHEST_PROTOCOL), None, self.buckets))
        elif bucket.stored:  # every shard of the bucket was forgotten (state TTL): so is the bucket's row
            # (not cleared again each batch: every call is a round trip, and most buckets of a small fleet are empty)
            self.state.clear()

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        # Only a timer a version before detection's own watermark registered (Spark deletes it after
        # this call): what it would have woken falls due with the bucket's next rows, by that watermark.
        yield from ()

    def close(self) -> None:
        pass

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        bucket = bucket_of_key(int(key[0]), self.buckets)  # (the key of a checkpoint of spread keys: bucket_keys.py)
        if bucket in (QUARANTINE_BUCKET, SOURCE_CLOCK_BUCKET):
            to_rows = _quarantine_rows if bucket == QUARANTINE_BUCKET else _source_clock_rows
            yield pd.DataFrame([row for frame in rows for row in to_rows(frame)], columns=_OUTPUT_COLUMNS)
            return
        frames = list(rows)
        with no_cycle_collection():
            result = self._detect(bucket, frames)
        yield result

    def _detect(self, bucket: int, frames: list[pd.DataFrame]) -> pd.DataFrame:
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
        before = NEVER_LATE if state.clock.watermark is None else state.clock.watermark
        capped = state.clock.advance(reads, self.cap, self.book.defaults.allowed_lateness_ms)
        after = NEVER_LATE if state.clock.watermark is None else state.clock.watermark
        # Each gap in the reads goes to every shard of the bucket, which knows whether its heartbeats travel there.
        items += [(EVERY_SHARD, (gap.source, gap.offset), gap) for gap in state.positions.advance(reads)]
        by_shard: ShardItems = defaultdict(list)
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
        outputs = run_bucket(state.engines, by_shard, before, after, self.book)
        self._save(state)
        rows = output_rows(outputs) + ([] if earliest is None else [mark_row(Kind.EARLIEST_EVENT, earliest)])
        # Detection's watermark after the batch: the second pass's bucket of this number runs by it (and the
        # sink, when a reset state caught up).
        rows.append(mark_row(Kind.WATERMARK, after, bucket))
        handed: dict[int, list[Handoff]] = defaultdict(list)
        for change in (change for out in outputs for change in out.handoffs):
            handed[bucket_of(shard_of_handoff(change), self.buckets)].append(change)
        return pd.DataFrame(rows + handoff_rows(handed), columns=_OUTPUT_COLUMNS)
