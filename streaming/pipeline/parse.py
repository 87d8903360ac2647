"""The parse stage: raw messages -> contract-checked, thinned events packed per bucket of shards.

A message that repeats an earlier one but for its time (a heartbeat, a metadata response of the same
endpoint) is validated and built from the earlier one's record (streaming/records/recurring.py).

It runs in Spark's Python workers, before the shuffle and any state: over the rows of Spark's kafka
connector (or a replay's file) in a `mapInArrow` (`parse_stage`), and inside the worker of the
Python Kafka reader as it reads (`parse_chunk`, streaming/pipeline/parsing_reader.py). It is where
event times meet the job's clock: the micro-batch's timestamp (Spark's `current_timestamp()` in a
streaming query, or the parsing reader's `planned_ms`: the driver's wall clock when it planned the
batch, kept in the offset log, so a batch run again decides the same). A `ts` more than
`rules.max_source_lead_ms` ahead of it is quarantined (`ts_ahead_of_clock`), and each chunk
reports, per `source`, how far its event times led that clock (`SOURCE_CLOCK_BUCKET`). Not the
executor's clock at parse time: a batch can run long after it was planned (its first, 29 s, as
Spark started under load), while the events of the next batch were sent after the planning
(streaming/detect/README.md, "Input bounds").
"""

from __future__ import annotations

import functools
import heapq
import marshal
import zlib
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from streaming.config import RuleBook
from streaming.detect import EVERY_SHARD, redundant_heartbeats, shards_of
from streaming.pipeline.packing import PackedItem, pack
from streaming.plumbing import clock
from streaming.plumbing.cycles import no_cycle_collection
from streaming.records.contract import (
    MAX_TRACKED_SOURCES,
    Event,
    Rejected,
    latest_valid_ts,
    refuse_ahead_of_clock,
)
from streaming.records.recurring import RecurringMessages
from streaming.source import MESSAGES_READ

__all__ = ["PARSED_SCHEMA", "QUARANTINE_BUCKET", "SOURCE_CLOCK_BUCKET", "ParseSettings", "bucket_of",
           "counting_messages", "parse_chunk", "parse_stage"]

# One row per bucket per chunk of input: the bucket's events, packed (see `_parse`; null when the
# chunk has none of the bucket's), the largest event time among them, which is all the watermark
# needs, and the chunk's runs of bus offsets (`reads`: marshal-ed `streaming.detect.bus_gaps.Run`s):
# every bucket follows every bus partition's offsets, to tell records lost unread from silence.
# `messages`: how many messages the chunk held, on its first row (0 on the others): the reader that
# parses as it reads hands Spark these rows, so Spark's input row count is theirs, and the job
# counts the messages read with this column (`MESSAGES_READ`).
_PARSED_ARROW_SCHEMA = pa.schema([("bucket", pa.int32()), ("ts", pa.int64()), ("events", pa.binary()),
                                  ("reads", pa.binary()), ("messages", pa.int64())])
PARSED_SCHEMA = from_arrow_schema(_PARSED_ARROW_SCHEMA)
# Rejected messages travel through the stateful operator too (with a null event time, which
# Spark's late-row filter keeps), so the source is read and parsed once, not once per branch.
QUARANTINE_BUCKET = -1
# Each chunk's clock readings per source travel the same way: marshal-ed (source, largest lead in
# ms, events, refused for being ahead) items, the lead being `ts` minus the job's clock; at most
# MAX_TRACKED_SOURCES of them, those that lead the most.
SOURCE_CLOCK_BUCKET = -2
# The records of the recurring messages this worker parsed (heartbeats, repeated metadata responses),
# kept from chunk to chunk and micro-batch to micro-batch: Spark reuses its Python workers.
_RECURRING = RecurringMessages()


# The column of the micro-batch's timestamp (epoch ms) beside the raw messages.
BATCH_MS = "batch_ms"


@dataclass(frozen=True)
class ParseSettings:
    """What the parse stage needs of the rules and the job: the state buckets, the heartbeat gap
    that thins them, and the bounds of event times."""

    buckets: int
    heartbeat_gap_ms: int
    max_clock_skew_ms: int
    max_source_lead_ms: int

    @classmethod
    def of(cls, book: RuleBook, buckets: int) -> ParseSettings:
        # Less than the shortest session timeout: see streaming.detect.thinning.
        return cls(buckets, book.shortest_session_timeout_ms - 1, book.defaults.max_clock_skew_ms,
                   book.defaults.max_source_lead_ms)


def bucket_of(shard: str, buckets: int) -> int:
    # crc32, not hash(): Python salts str hashes per process, and every worker must agree.
    return zlib.crc32(shard.encode()) % buckets


def _parse(batches: Iterator[pa.RecordBatch], settings: ParseSettings) -> Iterator[pa.RecordBatch]:
    """Contract check, heartbeat thinning and routing of each chunk of raw messages."""
    bucket_by_shard: dict[str, int] = {}
    for raw in batches:
        # The micro-batch's timestamp, the same on every row (`parse_stage`).
        now = raw.column(BATCH_MS)[0].as_py() if raw.num_rows else clock.now_ms()
        yield parse_chunk(settings, bucket_by_shard, now,
                          *(raw.column(name).to_pylist() for name in ("topic", "partition", "offset", "value")))


def parse_chunk(settings: ParseSettings, bucket_by_shard: dict[str, int], now_ms: int, topics: list[str],
                partitions: list[int], offsets: list[int], values: list[str | None]) -> pa.RecordBatch:
    """One chunk of raw messages (four columns of equal length) -> its PARSED_SCHEMA rows.

    `now_ms`: the job's clock, the micro-batch's timestamp; `bucket_by_shard`: a cache of
    `bucket_of` the caller keeps from chunk to chunk.
    """
    with no_cycle_collection():
        return _parse_chunk(zip(topics, partitions, offsets, values, strict=True), settings.buckets,
                            settings.heartbeat_gap_ms, bucket_by_shard,
                            latest_valid_ts(settings.max_clock_skew_ms, now_ms=now_ms), now_ms,
                            settings.max_source_lead_ms)


def _parse_chunk(raw: Iterable[tuple[str, int, int, str | None]], buckets: int, heartbeat_gap_ms: int,
                 bucket_by_shard: dict[str, int], latest_ts_ms: int, now_ms: int,
                 max_source_lead_ms: int) -> pa.RecordBatch:
    """The valid events of a chunk of (topic, partition, offset, value) leave as one row per bucket:
    the (shard, source, offset, event) items of its shards, packed (streaming.pipeline.packing); each
    of the `buckets` rows carries the chunk's runs of consecutive offsets per bus partition (`reads`).
    The rejected messages of a chunk leave as one quarantine row: marshal-ed (source, offset, raw
    text, reason, detail, event source or None) items. The clock readings leave as one
    `SOURCE_CLOCK_BUCKET` row (see there).
    `latest_ts_ms`: the latest event time the contract accepts (the job's clock + clock skew);
    `now_ms`: the job's clock (the micro-batch's timestamp), which no accepted event time leads by
    more than `max_source_lead_ms`.
    """
    packs: dict[int, list[PackedItem]] = defaultdict(list)
    latest: dict[int, int] = {}
    rejected: list[tuple[Any, ...]] = []
    valid: list[tuple[Event, str, int]] = []
    # source -> [largest lead, events, refused for being ahead]
    clocks: dict[str, list[int]] = {}
    # A streaming.detect.Run, as a list while it grows (marshal-ed as a plain tuple)
    runs: list[list[Any]] = []
    run: list[Any] = [None, 0, 0, None, None, None]
    for topic, partition, offset, value in raw:
        src = f"{topic}:{partition}"
        if offset == run[2] + 1 and src == run[0]:
            run[2] = offset
        else:
            run = [src, offset, offset, None, None, None]
            runs.append(run)
        try:
            event = _RECURRING.parse(value, topic, latest_ts_ms)
            lead = event.ts - now_ms
            reading = clocks.get(event.source)
            if reading is None:
                clocks[event.source] = [lead, 1, 0]
            else:
                reading[1] += 1
                if lead > reading[0]:
                    reading[0] = lead
            if lead > max_source_lead_ms:
                refuse_ahead_of_clock(event, now_ms, max_source_lead_ms)
            valid.append((event, src, offset))
            if run[3] is None:
                run[3] = run[5] = event.ts
            elif event.ts > run[5]:
                run[5] = event.ts
            run[4] = event.ts
        except Rejected as exc:
            source = exc.source
            rejected.append((src, offset, value, exc.reason, exc.detail, source))
            if source is not None and exc.ts is not None:  # refused for a `ts` ahead of the clock
                reading = clocks.get(source)
                if exc.reason != "ts_ahead_of_clock":  # out of range: refused before it was read above
                    lead = exc.ts - now_ms
                    if reading is None:
                        reading = clocks[source] = [lead, 0, 0]
                    reading[0] = max(reading[0], lead)
                    reading[1] += 1
                reading[2] += 1
    redundant = redundant_heartbeats([event for event, _, _ in valid], heartbeat_gap_ms)
    for i, (event, src, offset) in enumerate(valid):
        if i in redundant:
            continue
        for shard in shards_of(event):
            if shard == EVERY_SHARD:  # to every bucket, whose shards all take it (state.py)
                for bucket in range(buckets):
                    packs[bucket].append((shard, src, offset, event))
                    latest[bucket] = max(latest.get(bucket, event.ts), event.ts)
                continue
            bucket = bucket_by_shard.get(shard)
            if bucket is None:
                bucket = bucket_by_shard[shard] = bucket_of(shard, buckets)
            packs[bucket].append((shard, src, offset, event))
            latest[bucket] = max(latest.get(bucket, event.ts), event.ts)
    bucket_column: list[int] = list(range(buckets)) if runs else []
    ts_column: list[int | None] = [latest.get(bucket) for bucket in bucket_column]
    events_column = [pack(packs[bucket]) if bucket in packs else None for bucket in bucket_column]
    reads = marshal.dumps([tuple(r) for r in runs])
    reads_column: list[bytes | None] = [reads] * len(bucket_column)
    if rejected:
        bucket_column.append(QUARANTINE_BUCKET)
        ts_column.append(None)
        events_column.append(marshal.dumps(rejected))
        reads_column.append(None)
    if clocks:
        items = [(source, lead, n, ahead) for source, (lead, n, ahead) in clocks.items()]
        if len(items) > MAX_TRACKED_SOURCES:
            items = heapq.nlargest(MAX_TRACKED_SOURCES, items, key=lambda item: item[1])
        bucket_column.append(SOURCE_CLOCK_BUCKET)
        ts_column.append(None)
        events_column.append(marshal.dumps(items))
        reads_column.append(None)
    messages_column = [0] * len(bucket_column)
    if messages_column:
        messages_column[0] = sum(last - first + 1 for _, first, last, *_ in runs)
    return pa.RecordBatch.from_pydict({"bucket": bucket_column, "ts": ts_column, "events": events_column,
                                      "reads": reads_column, "messages": messages_column},
                                     schema=_PARSED_ARROW_SCHEMA)


def parse_stage(raw: DataFrame, book: RuleBook, buckets: int) -> DataFrame:
    """Raw messages (the readers' columns) -> PARSED_SCHEMA rows, ready to group by bucket.

    Heartbeats are thinned here, per chunk of input, before the shuffle and any state: a
    stateless Spark SQL stage cannot drop them (it would need the previous row of each broker),
    and a grouping stage would hold them back for a watermark.
    """
    # current_timestamp() in a streaming query is the micro-batch's timestamp (see the docstring).
    return raw.select("topic", "partition", "offset", "value",
                      F.unix_millis(F.current_timestamp()).alias(BATCH_MS)).mapInArrow(
        functools.partial(_parse, settings=ParseSettings.of(book, buckets)), PARSED_SCHEMA)


def counting_messages(parsed: DataFrame) -> DataFrame:
    """`parsed` (PARSED_SCHEMA rows), with the messages they hold counted in each micro-batch's
    progress (`streaming.source.bus_loss.messages_read`): Spark counts the parsing reader's rows."""
    return parsed.observe(MESSAGES_READ, F.sum("messages").alias("messages"))
