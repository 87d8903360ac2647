"""The Spark job: source -> parse/quarantine -> per-shard detection with event-time timers -> sinks.

Only wiring lives here; the rules are plain Python in `streaming.detect`.
"""

from __future__ import annotations

import functools
import gc
import json
import logging
import marshal
import os
import pickle
import sys
import zlib
from collections import defaultdict
from collections.abc import Container, Iterator
from contextlib import contextmanager
from typing import Any

import pandas as pd
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

from streaming.alert import encode_output
from streaming.config import FleetwatchConfig, RuleBook
from streaming.contract import Event, Rejected, event_to_dict, latest_valid_ts, parse_message
from streaming.detect.engine import Output, Position, ShardEngine, shards_of
from streaming.detect.thinning import redundant_heartbeats
from streaming.jars import connector_jars
from streaming.packing import PackedItem, pack, unpack

__all__ = ["OUTPUT_SCHEMA", "PARSED_SCHEMA", "bucket_of", "build_pipeline", "checkpoint_id", "checkpoint_path",
           "parse_stage", "spark_session"]

log = logging.getLogger(__name__)

# One row per bucket per chunk of input: the bucket's events, packed (see `_parse`), and the
# largest event time among them, which is all the watermark needs.
_PARSED_ARROW_SCHEMA = pa.schema([("bucket", pa.int32()), ("ts", pa.int64()), ("events", pa.binary())])
PARSED_SCHEMA = from_arrow_schema(_PARSED_ARROW_SCHEMA)
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
# Rejected messages travel through the stateful operator too (with a null event time, which
# Spark's late-row filter keeps), so the source is read and parsed once, not once per branch.
QUARANTINE_BUCKET = -1


def _connector_jars() -> dict[str, str]:
    """`spark.jars` with Spark's kafka connector as `make jars` fetched it, when this process
    starts Spark itself. Under spark-submit the JVM is already up with its own `--packages`
    (PYSPARK_GATEWAY_PORT is set), and a `spark.jars` of ours would replace them."""
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        return {}
    jars = connector_jars()
    return {"spark.jars": ",".join(str(jar) for jar in jars)} if jars else {}


def spark_session(config: FleetwatchConfig, app_name: str = "fleetwatch") -> SparkSession:
    # Workers must start with this interpreter (it has pyarrow and the project installed).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder
    for key, value in _connector_jars().items():
        builder = builder.config(key, value)
    spark = (
        builder.appName(app_name)
        .master(config.spark.master)
        .config("spark.sql.shuffle.partitions", str(config.spark.shuffle_partitions))
        .config("spark.sql.streaming.stateStore.providerClass",
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
        # Commit a micro-batch's state changes as a changelog instead of a new RocksDB snapshot.
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        .config("spark.ui.enabled", "false")
        # The console progress bar would interleave with the structured log lines on stderr.
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        # Imports the job's modules once per executor and keeps pyspark's bytecode cached.
        .config("spark.python.daemon.module", "streaming.spark_daemon")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        # Bigger Arrow chunks into the parse stage: heartbeats are thinned per chunk, and a
        # chunk of 10,000 rows (the default) held only ~3 heartbeats per broker at 1,000 clusters.
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "100000")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    return spark


def bucket_of(shard: str, buckets: int) -> int:
    # crc32, not hash(): Python salts str hashes per process, and every worker must agree.
    return zlib.crc32(shard.encode()) % buckets


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Pause Python's cycle collector while a stage turns a chunk into objects.

    Both stages allocate hundreds of thousands of small objects (events, tuples) that stay alive
    until the chunk is done and form no cycles; the collector walked them again and again as
    they piled up, for nothing: a third of both stages' Python time on a 1,000 x 12 fleet's
    events. Reference counting still frees everything as usual; cycles made meanwhile wait for
    the next collection.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _parse(batches: Iterator[pa.RecordBatch], buckets: int, heartbeat_gap_ms: int,
           max_clock_skew_ms: int) -> Iterator[pa.RecordBatch]:
    """Contract check, heartbeat thinning and routing of each chunk of raw messages."""
    bucket_by_shard: dict[str, int] = {}
    for raw in batches:
        with _no_cycle_collection():
            parsed = _parse_chunk(raw, buckets, heartbeat_gap_ms, bucket_by_shard, latest_valid_ts(max_clock_skew_ms))
        yield parsed


def _parse_chunk(raw: pa.RecordBatch, buckets: int, heartbeat_gap_ms: int,
                 bucket_by_shard: dict[str, int], latest_ts_ms: int) -> pa.RecordBatch:
    """The valid events of a chunk leave as one row per bucket: the (shard, source, offset, event)
    items of its shards, packed (streaming.packing). The rejected messages of a chunk leave as
    one quarantine row: marshal-ed (source, offset, raw text, reason, detail) items.
    `latest_ts_ms`: the latest event time the contract accepts (wall clock + clock skew).
    """
    packs: dict[int, list[PackedItem]] = defaultdict(list)
    latest: dict[int, int] = {}
    rejected: list[tuple[Any, ...]] = []
    valid: list[tuple[Event, str, int]] = []
    for topic, partition, offset, value in zip(*(raw.column(name).to_pylist()
                                                 for name in ("topic", "partition", "offset", "value")),
                                               strict=True):
        src = f"{topic}:{partition}"
        try:
            valid.append((parse_message(value, topic, latest_ts_ms), src, offset))
        except Rejected as exc:
            rejected.append((src, offset, value, exc.reason, exc.detail))
    redundant = redundant_heartbeats([event for event, _, _ in valid], heartbeat_gap_ms)
    for i, (event, src, offset) in enumerate(valid):
        if i in redundant:
            continue
        for shard in shards_of(event):
            bucket = bucket_by_shard.get(shard)
            if bucket is None:
                bucket = bucket_by_shard[shard] = bucket_of(shard, buckets)
            packs[bucket].append((shard, src, offset, event))
            latest[bucket] = max(latest.get(bucket, event.ts), event.ts)
    bucket_column = list(packs)
    ts_column: list[int | None] = [latest[bucket] for bucket in bucket_column]
    events_column = [pack(packs[bucket]) for bucket in bucket_column]
    if rejected:
        bucket_column.append(QUARANTINE_BUCKET)
        ts_column.append(None)
        events_column.append(marshal.dumps(rejected))
    return pa.RecordBatch.from_pydict({"bucket": bucket_column, "ts": ts_column, "events": events_column},
                                     schema=_PARSED_ARROW_SCHEMA)


def parse_stage(raw: DataFrame, book: RuleBook, buckets: int) -> DataFrame:
    """Raw messages (the readers' columns) -> PARSED_SCHEMA rows, ready to group by bucket.

    Heartbeats are thinned here, per chunk of input, before the shuffle and any state: a
    stateless Spark SQL stage cannot drop them (it would need the previous row of each broker),
    and a grouping stage would hold them back for a watermark.
    """
    # Less than the shortest session timeout: see streaming.detect.thinning.
    gap_ms = book.shortest_session_timeout_ms - 1
    return raw.select("topic", "partition", "offset", "value").mapInArrow(
        functools.partial(_parse, buckets=buckets, heartbeat_gap_ms=gap_ms,
                          max_clock_skew_ms=book.defaults.max_clock_skew_ms), PARSED_SCHEMA)


def _output_rows(out: Output) -> list[tuple[Any, ...]]:
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
        engine = pickle.loads(stored[1]) if stored is not None else ShardEngine(shard)
        out = engine.advance(watermark, self.book) if events is None else engine.process(events, watermark, self.book)
        if engine.forgotten(watermark, self.book):
            engines.pop(shard, None)  # quiet for longer than the state TTL, nothing open
        else:
            engines[shard] = (engine.next_deadline(self.book), pickle.dumps(engine, protocol=pickle.HIGHEST_PROTOCOL))
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
        with _no_cycle_collection():
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


def build_pipeline(raw: DataFrame, book: RuleBook, buckets: int) -> DataFrame:
    """Raw messages (the readers' columns) -> OUTPUT_SCHEMA rows; `buckets`: spark.state_buckets."""
    parsed = parse_stage(raw, book, buckets)
    lateness = book.defaults.allowed_lateness_ms
    events = (
        parsed.withColumn("event_time", F.timestamp_millis(F.col("ts")))
        .withWatermark("event_time", f"{lateness} milliseconds")
        # Without the event-time column below the watermark, Spark no longer drops late rows
        # silently; the engine sees them and sends them to quarantine ("nothing is lost").
        # Timers still follow the query's watermark.
        .drop("event_time")
    )
    return events.groupBy("bucket").transformWithStateInPandas(
        statefulProcessor=DetectorProcessor(book, buckets),
        outputStructType=OUTPUT_SCHEMA,
        outputMode="Append",
        timeMode="EventTime",
    )


def checkpoint_path(config: FleetwatchConfig, name: str) -> str:
    # Plain string joining: Path() would turn an object-store URL (s3a://b/x) into s3a:/b/x.
    return f"{config.spark.checkpoint_dir.rstrip('/')}/{name}"


def checkpoint_id(spark: SparkSession, location: str) -> str | None:
    """The id Spark keeps in a streaming checkpoint (the `metadata` file's `id`: the query id,
    the same across restarts), or None while the checkpoint is empty. Read through Hadoop's file
    system, so a checkpoint on HDFS or an object store works as a local one."""
    jvm = spark._jvm
    path = jvm.org.apache.hadoop.fs.Path(f"{location.rstrip('/')}/metadata")
    fs = path.getFileSystem(spark._jsc.hadoopConfiguration())
    if not fs.exists(path):
        return None
    stream = fs.open(path)
    try:
        text = jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()
    return str(json.loads(text.splitlines()[0])["id"])
