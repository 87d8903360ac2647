"""The telemetry stream: Spark's `kafka` source for a configured bus that reads right with it, else ours.

Both paths yield the same columns and types (`raw_rows`), so the job downstream
does not know which one runs. Which one runs is decided once per checkpoint (`choose_source`):
Spark cannot resume a checkpoint with another source than the one that wrote it. Spark's source
plans up to what ListOffsets(LATEST) answers, so `auto` gives it only a bus that answers the high
watermark (`streaming.bus.check_list_offsets`, by behaviour); ours is right on any bus.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamReader

from streaming.bus import BusAccess, check_list_offsets
from streaming.config import BusConfig, ConfigError
from streaming.plumbing.jars import SPARK_KAFKA
from streaming.source.kafka_options import CLIENT_OPTION, SHORT_NAME
from streaming.source.kafka_reader import FleetwatchKafkaDataSource
from streaming.source.raw_rows import COLUMNS

__all__ = ["PYTHON_SOURCE", "SPARK_SOURCE", "choose_source", "jvm_kafka_available", "python_reader", "read_telemetry"]

log = logging.getLogger(__name__)

SPARK_SOURCE = "kafka"  # Spark's own connector, spark-sql-kafka-0-10
PYTHON_SOURCE = SHORT_NAME  # the project's reader over kafka-python
# How long the ListOffsets check may wait for a configured bus (it needs a topic and a produce).
CHECK_TIMEOUT_S = 30.0
_KAFKA_PROVIDER = "org/apache/spark/sql/kafka010/KafkaSourceProvider.class"


def jvm_kafka_available(spark: SparkSession) -> bool:
    """True when the `spark-sql-kafka-0-10` connector is on the driver's classpath.

    Looks the class file up as a resource in the loader `format("kafka")` uses (which also
    sees `--jars` and `spark.jars`): a missing class costs no exception, and a failed
    `format("kafka").load()` would cost about a second. No JVM at all (Spark Connect) counts
    as not available.
    """
    try:
        loader = spark._jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
        return loader.getResource(_KAFKA_PROVIDER) is not None
    except Exception as exc:  # any py4j or attribute failure means: cannot use the JVM source
        log.debug("JVM kafka connector lookup failed", extra={"error": repr(exc)})
        return False


def _pinned_source(spark: SparkSession, checkpoint: str) -> str | None:
    """The source a checkpoint was written by: a marker file `source=<name>` beside Spark's own
    files (through Hadoop's file system, so an object-store checkpoint works too). A checkpoint
    with offsets but no marker predates the marker and was written by the Python source."""
    jvm = spark._jvm
    root = jvm.org.apache.hadoop.fs.Path(checkpoint)
    fs = root.getFileSystem(spark._jsc.hadoopConfiguration())
    for name in (SPARK_SOURCE, PYTHON_SOURCE):
        if fs.exists(jvm.org.apache.hadoop.fs.Path(checkpoint, f"source={name}")):
            return name
    return PYTHON_SOURCE if fs.exists(jvm.org.apache.hadoop.fs.Path(checkpoint, "offsets")) else None


def _pin_source(spark: SparkSession, checkpoint: str, source: str) -> None:
    jvm = spark._jvm
    marker = jvm.org.apache.hadoop.fs.Path(checkpoint, f"source={source}")
    marker.getFileSystem(spark._jsc.hadoopConfiguration()).create(marker, True).close()


def choose_source(spark: SparkSession, bus: BusConfig, checkpoint: str, access: str | BusAccess | None = None) -> str:
    """`SPARK_SOURCE` or `PYTHON_SOURCE` for a query with this checkpoint, pinned to it; logs one line
    that says which and why ("telemetry source: ...").

    `bus.source` auto: the Python reader for the embedded broker (Tansu) or without the connector on
    the classpath. For a configured bus with the connector, how the bus answers ListOffsets(LATEST)
    decides (`streaming.bus.check_list_offsets`, by behaviour): the connector when it is the high
    watermark (Kafka), else the Python reader (a Tansu bus: the connector would trust an offset
    inside the last record batch, and the newest records would wait for more data: false
    `heartbeat_lost` alerts). A bus the check cannot reach is a ConfigError: the choice is pinned
    for good, so it is not guessed (start again once the bus answers, or set bus.source).
    `spark` on a bus that fails the check is a ConfigError too (it would raise false alerts); when
    the check cannot reach the bus it is a warning and the job starts. A checkpoint keeps the
    source that started it (a checkpoint of the connector is checked against the bus again);
    asking for the other one is a configuration error (start a new checkpoint to switch).
    `access`: the bus the query reads (its security), by default `bus.bootstrap_servers`.
    """
    if access is None and bus.bootstrap_servers:
        access = BusAccess.from_config(bus.bootstrap_servers, bus.security)
    reach = BusAccess.of(access) if access is not None else None
    available = jvm_kafka_available(spark)
    pinned = _pinned_source(spark, checkpoint)
    check = None
    if bus.source == "spark":
        wanted, why = SPARK_SOURCE, "bus.source: spark"
    elif bus.source == "python":
        wanted, why = PYTHON_SOURCE, "bus.source: python"
    elif pinned is not None:
        wanted, why = pinned, f"bus.source auto, the source that started the checkpoint {checkpoint}"
    elif not bus.bootstrap_servers:
        wanted, why = PYTHON_SOURCE, ("bus.source auto, the embedded Tansu broker: its ListOffsets(LATEST) is not "
                                      "the high watermark, which the Spark connector would trust")
    elif not available:
        wanted, why = PYTHON_SOURCE, f"bus.source auto, the {_NAMES[SPARK_SOURCE]} is not on the classpath"
    else:
        assert reach is not None
        check = check_list_offsets(reach, timeout_s=CHECK_TIMEOUT_S)
        if check.verdict is None:
            raise ConfigError(f"bus.source auto: {check.reason}; start again once the bus answers, or set "
                              "bus.source to spark (a Kafka bus) or python (any bus)")
        wanted = SPARK_SOURCE if check.verdict else PYTHON_SOURCE
        why = f"bus.source auto: {check.reason}" + ("" if check.verdict else ", which the Spark connector would trust")
    if pinned is not None and wanted != pinned:
        raise ConfigError(f"the checkpoint {checkpoint} was written by the {_NAMES[pinned]}, bus.source asks for the "
                          f"{_NAMES[wanted]}: a checkpoint cannot switch sources (set bus.source back, or start a new "
                          "spark.checkpoint_dir)")
    if wanted == SPARK_SOURCE and not available:
        raise ConfigError(f"the {_NAMES[SPARK_SOURCE]} is not on the classpath: run `make jars` (it fetches "
                          f"{SPARK_KAFKA}), or give spark-submit the verified jars that "
                          "`python -m streaming.plumbing.jars connector` prints (--jars; deploy/spark/submit.sh does)")
    if wanted == SPARK_SOURCE and check is None and reach is not None:
        check = check_list_offsets(reach, timeout_s=CHECK_TIMEOUT_S)
        if check.verdict is False:
            remedy = ("start a new spark.checkpoint_dir with bus.source python or auto" if pinned is not None
                      else "set bus.source to python or auto")
            raise ConfigError(f"the {_NAMES[SPARK_SOURCE]} cannot read this bus: {check.reason}, which the connector "
                              f"would trust (the newest records would wait for more data: false heartbeat_lost "
                              f"alerts); {remedy}")
        if check.verdict is None:
            why += f" (not checked: {check.reason})"
    if pinned is None:
        _pin_source(spark, checkpoint, wanted)
    extra = {"source": wanted, "checkpoint": checkpoint, "bootstrap": reach.bootstrap if reach else None}
    if check is not None:
        extra["listoffsets_check_s"] = check.took_s
    (log.warning if check is not None and check.verdict is None else log.info)(
        f"telemetry source: {_NAMES[wanted]} ({why})", extra=extra)
    return wanted


_NAMES = {SPARK_SOURCE: "Spark kafka connector", PYTHON_SOURCE: "Python kafka reader"}


def _read_tasks(spark: SparkSession) -> int:
    """How many tasks read a micro-batch of the Python source: two per core Spark has. Every
    task has a fixed cost (~20-50 ms), so fewer than the 12 topic-partitions; two per core
    even out their sizes."""
    return 2 * spark.sparkContext.defaultParallelism


# And no more tasks than one per this many records: a small fleet's batch of a few dozen records is
# read by one task, not by one per topic-partition that moved, since a task costs about what parsing
# a few hundred records does (bench/batch_cost.py, 3 x 3 fleet, 1 s trigger, seven runs each: a batch's
# Spark stages ~245 -> ~180 ms, its CPU 0.32-0.42 -> 0.27-0.34 s). A batch of this many records per task
# `_read_tasks` allows (4,000 on two cores) or more is read by as many tasks as before.
_TASK_RECORDS = 1_000


def python_reader(spark: SparkSession, bus: str | BusAccess, topics: Sequence[str], starting_offsets: str = "earliest",
                  max_records_per_batch: int | None = None,
                  data_source: type[FleetwatchKafkaDataSource] = FleetwatchKafkaDataSource) -> DataStreamReader:
    """The Python reader's stream of `topics` (`read_telemetry`'s PYTHON_SOURCE), ready to load;
    `data_source`: the reader's class, or a subclass of it."""
    access = BusAccess.of(bus)
    spark.dataSource.register(data_source)
    reader = (
        spark.readStream.format(data_source.name())
        .option("bootstrap_servers", access.bootstrap)
        .option("topics", ",".join(topics))
        .option("starting_offsets", starting_offsets)
        .options(**{CLIENT_OPTION + name: str(value) for name, value in access.client_settings.items()})
    )
    if max_records_per_batch is not None:
        reader = reader.option("max_records_per_batch", str(max_records_per_batch))
    return reader.option("max_partitions", str(_read_tasks(spark))).option("min_task_records", str(_TASK_RECORDS))


def read_telemetry(
    spark: SparkSession,
    bus: str | BusAccess,
    topics: Sequence[str],
    starting_offsets: str = "earliest",
    max_records_per_batch: int | None = None,
    *,
    source: str = PYTHON_SOURCE,
    kafka_options: dict[str, str] | None = None,
) -> DataFrame:
    """A streaming DataFrame of the raw telemetry messages of `topics`, read by `source`.

    Columns: key STRING, value STRING, topic STRING, partition INT, offset LONG,
    timestamp TIMESTAMP (the Kafka record timestamp). `max_records_per_batch`: None is the
    source's default (the Python source caps at `DEFAULT_MAX_RECORDS_PER_BATCH`, the JVM
    source is unbounded), 0 is no cap. The Python source reads each micro-batch in two tasks
    per core (the JVM source in one per topic-partition). `kafka_options`: more options of Spark's
    source (`failOnDataLoss`). `bus`: its addresses, and the security both sources connect with.
    """
    access = BusAccess.of(bus)
    if starting_offsets not in ("earliest", "latest"):
        raise ValueError(f"starting_offsets must be earliest or latest, got {starting_offsets!r}")
    if not topics:
        raise ValueError("read_telemetry needs at least one topic")
    log.debug("telemetry source", extra={"source": source, "topics": list(topics)})  # choose_source said why
    if source == SPARK_SOURCE:
        reader = (
            spark.readStream.format(SPARK_SOURCE)
            .option("kafka.bootstrap.servers", access.bootstrap)
            # A pattern, not a list: with `subscribe` the connector's admin client describes every named
            # topic and a deleted one fails the query (UnknownTopicOrPartitionException, measured on
            # Kafka 4.4); matched by a pattern, a deleted topic's partitions are gone (data loss, counted)
            # and a topic created again is read from its beginning. The offsets are the same.
            .option("subscribePattern", "|".join(f"^{re.escape(t)}$" for t in topics))
            .option("startingOffsets", starting_offsets)
            .options(**access.spark_options, **(kafka_options or {}))
        )
        if max_records_per_batch:
            reader = reader.option("maxOffsetsPerTrigger", str(max_records_per_batch))
    elif source == PYTHON_SOURCE:
        reader = python_reader(spark, access, topics, starting_offsets, max_records_per_batch)
    else:
        raise ValueError(f"source must be {SPARK_SOURCE} or {PYTHON_SOURCE}, got {source!r}")
    # Spark's kafka source has binary key/value; the cast is a no-op for the Python source.
    df = reader.load()
    return df.select(
        F.col("key").cast("string").alias("key"),
        F.col("value").cast("string").alias("value"),
        *COLUMNS[2:],
    )
