"""The Spark job: source -> parse/quarantine -> per-shard detection with event-time timers -> sinks.

Only wiring lives here; the rules are plain Python in `streaming.detect`.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import sys
from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from streaming.config import FleetwatchConfig, RuleBook
from streaming.contract import Rejected, event_to_dict, parse_message
from streaming.detect.engine import Output, ShardEngine, shards_of

__all__ = ["OUTPUT_SCHEMA", "PARSED_SCHEMA", "build_pipeline", "parse_stage", "spark_session"]

log = logging.getLogger(__name__)

PARSED_SCHEMA = StructType([
    StructField("shard", StringType()),
    StructField("ts", LongType()),
    StructField("src", StringType()),
    StructField("pos", LongType()),
    StructField("payload", StringType()),
    StructField("reason", StringType()),
])
# One output row: an alert, a state snapshot for the store, or a quarantined message.
OUTPUT_SCHEMA = StructType([
    StructField("kind", StringType()),
    StructField("key", StringType()),
    StructField("ts", LongType()),
    StructField("payload", StringType()),
])
_ENGINE_STATE = StructType([StructField("engine", BinaryType())])
# Rejected messages travel through the stateful operator too (with a null event time, which
# Spark's late-row filter keeps), so the source is read and parsed once, not once per branch.
QUARANTINE_SHARD = "~quarantine"


def spark_session(config: FleetwatchConfig, app_name: str = "fleetwatch") -> SparkSession:
    # Workers must start with this interpreter (it has pyarrow and the project installed).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.appName(app_name)
        .master(config.spark.master)
        .config("spark.sql.shuffle.partitions", str(config.spark.shuffle_partitions))
        .config("spark.sql.streaming.stateStore.providerClass",
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
        .config("spark.ui.enabled", "false")
        # The console progress bar would interleave with the structured log lines on stderr.
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _parse(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    """Contract check and routing: one row per (shard, event), or one quarantine row.

    A valid message travels on as its original text: re-serializing the parsed record cost
    more than parsing it again behind the shuffle (measured in bench/throughput.py).
    """
    for raw in batches:
        rows: list[tuple[Any, ...]] = []
        for topic, partition, offset, value in zip(raw["topic"], raw["partition"], raw["offset"],
                                                   raw["value"], strict=True):
            src = f"{topic}:{partition}"
            try:
                event = parse_message(value, topic)
            except Rejected as exc:
                rows.append((QUARANTINE_SHARD, None, src, int(offset), value, exc.reason))
                continue
            rows.extend((shard, event.ts, src, int(offset), value, None) for shard in shards_of(event))
        yield pd.DataFrame(rows, columns=[f.name for f in PARSED_SCHEMA.fields])


def parse_stage(raw: DataFrame) -> DataFrame:
    """Raw messages (the readers' columns) -> PARSED_SCHEMA rows, ready to group by shard."""
    return raw.select("topic", "partition", "offset", "value").mapInPandas(_parse, PARSED_SCHEMA)


def _output_rows(out: Output) -> pd.DataFrame:
    rows = [("alert", a.subject, a.event_ms, json.dumps({**a.to_dict(), "sort_key": a.sort_key()},
                                                          separators=(",", ":")))
            for a in out.alerts]
    rows += [("late", f"{src}:{pos}", event.ts, json.dumps(event_to_dict(event), separators=(",", ":")))
             for (src, pos), event in out.late]
    for kind, items in (("broker", out.brokers), ("cluster", out.clusters), ("target", out.targets),
                        ("transition", out.transitions), ("controller", out.controller_changes)):
        rows += [(kind, None, item.get("updated_ms") or item.get("ts"), json.dumps(item, separators=(",", ":")))
                 for item in items]
    return pd.DataFrame(rows, columns=[f.name for f in OUTPUT_SCHEMA.fields])


def _quarantine_rows(frame: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({
        "kind": "quarantine",
        "key": frame["src"] + ":" + frame["pos"].astype(str),
        "ts": None,
        "payload": [json.dumps({"reason": reason, "raw": raw})
                    for reason, raw in zip(frame["reason"], frame["payload"], strict=True)],
    }, columns=[f.name for f in OUTPUT_SCHEMA.fields])


class DetectorProcessor(StatefulProcessor):
    """Keeps one ShardEngine per shard in the state store and wakes it with event-time timers."""

    def __init__(self, book: RuleBook) -> None:
        self.book = book

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getValueState("engine", _ENGINE_STATE)

    def _load(self, shard: str) -> ShardEngine:
        if self.state.exists():
            return pickle.loads(self.state.get()[0])
        return ShardEngine(shard)

    def _save(self, engine: ShardEngine) -> None:
        self.state.update((pickle.dumps(engine, protocol=pickle.HIGHEST_PROTOCOL),))
        for timer in list(self.handle.listTimers()):
            self.handle.deleteTimer(timer)
        deadline = engine.next_deadline(self.book)
        if deadline is not None:
            # Spark fires a timer once the watermark reaches it; the engine's timers fire once
            # the watermark has passed them, hence the extra millisecond.
            self.handle.registerTimer(deadline + 1)

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        (shard,) = key
        if shard == QUARANTINE_SHARD:
            yield from (_quarantine_rows(frame) for frame in rows)
            return
        engine = self._load(shard)
        events = []
        for frame in rows:
            for src, pos, payload in zip(frame["src"], frame["pos"], frame["payload"], strict=True):
                events.append(((src, int(pos)), parse_message(payload)))
        out = engine.process(events, timerValues.getCurrentWatermarkInMs(), self.book)
        self._save(engine)
        yield _output_rows(out)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        (shard,) = key
        engine = self._load(shard)
        out = engine.advance(timerValues.getCurrentWatermarkInMs(), self.book)
        self._save(engine)
        yield _output_rows(out)

    def close(self) -> None:
        pass


def build_pipeline(raw: DataFrame, book: RuleBook) -> DataFrame:
    """Raw messages (the readers' columns) -> OUTPUT_SCHEMA rows."""
    parsed = parse_stage(raw)
    lateness = book.defaults.allowed_lateness_ms
    events = (
        parsed.withColumn("event_time", F.timestamp_millis(F.col("ts")))
        .withWatermark("event_time", f"{lateness} milliseconds")
        # Without the event-time column below the watermark, Spark no longer drops late rows
        # silently; the engine sees them and sends them to quarantine ("nothing is lost").
        # Timers still follow the query's watermark.
        .drop("event_time")
    )
    return events.groupBy("shard").transformWithStateInPandas(
        statefulProcessor=DetectorProcessor(book),
        outputStructType=OUTPUT_SCHEMA,
        outputMode="Append",
        timeMode="EventTime",
    )


def checkpoint_path(config: FleetwatchConfig, name: str) -> str:
    # Plain string joining: Path() would turn an object-store URL (s3a://b/x) into s3a:/b/x.
    return f"{config.spark.checkpoint_dir.rstrip('/')}/{name}"
