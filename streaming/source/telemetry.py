"""The telemetry stream: Spark's `kafka` source for a configured bus, else ours.

Both paths yield the same columns and types (`raw_rows`), so the job downstream
does not know which one runs. Which one runs is decided once per checkpoint (`choose_source`):
Spark cannot resume a checkpoint with another source than the one that wrote it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from streaming.bus import BusAccess
from streaming.config import BusConfig, ConfigError
from streaming.jars import SPARK_KAFKA
from streaming.source.kafka_options import CLIENT_OPTION, SHORT_NAME
from streaming.source.kafka_reader import FleetwatchKafkaDataSource
from streaming.source.raw_rows import COLUMNS

__all__ = ["PYTHON_SOURCE", "SPARK_SOURCE", "choose_source", "jvm_kafka_available", "read_telemetry"]

log = logging.getLogger(__name__)

SPARK_SOURCE = "kafka"  # Spark's own connector, spark-sql-kafka-0-10
PYTHON_SOURCE = SHORT_NAME  # the project's reader over kafka-python
_KAFKA_PROVIDER = "org/apache/spark/sql/kafka010/KafkaSourceProvider.class"


def jvm_kafka_available(spark: SparkSession) -> bool:
    """True when the `spark-sql-kafka-0-10` connector is on the driver's classpath.

    Looks the class file up as a resource in the loader `format("kafka")` uses (which also
    sees `--packages` and `spark.jars`): a missing class costs no exception, and a failed
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


def choose_source(spark: SparkSession, bus: BusConfig, checkpoint: str) -> str:
    """`SPARK_SOURCE` or `PYTHON_SOURCE` for a query with this checkpoint, pinned to it.

    `bus.source` auto: Spark's connector for a configured bus when it is on the classpath, the
    Python reader for the embedded broker (Tansu answers ListOffsets with the last batch's base
    offset, which Spark's source trusts: the newest records would wait for more data) or without
    the connector. A checkpoint keeps the source that started it; asking for the other one is a
    configuration error (start a new checkpoint to switch).
    """
    available = jvm_kafka_available(spark)
    pinned = _pinned_source(spark, checkpoint)
    if bus.source == "spark" or (bus.source == "auto" and pinned is None and bus.bootstrap_servers and available):
        wanted = SPARK_SOURCE
    elif bus.source == "python" or pinned is None:
        wanted = PYTHON_SOURCE
    else:
        wanted = pinned  # auto with a checkpoint: resume with its source
    if pinned is not None and wanted != pinned:
        raise ConfigError(f"the checkpoint {checkpoint} was written by the {_NAMES[pinned]}, bus.source asks for the "
                          f"{_NAMES[wanted]}: a checkpoint cannot switch sources (set bus.source back, or start a new "
                          "spark.checkpoint_dir)")
    if wanted == SPARK_SOURCE and not available:
        raise ConfigError(f"the {_NAMES[SPARK_SOURCE]} is not on the classpath: run `make jars` (it fetches "
                          f"{SPARK_KAFKA}), or spark-submit --packages org.apache.spark:spark-sql-kafka-0-10_2.13:"
                          f"{SPARK_KAFKA.rsplit('-', 1)[1]}")
    if pinned is None:
        _pin_source(spark, checkpoint, wanted)
    return wanted


_NAMES = {SPARK_SOURCE: "Spark kafka connector", PYTHON_SOURCE: "Python kafka reader"}


def _read_tasks(spark: SparkSession) -> int:
    """How many tasks read a micro-batch of the Python source: two per core Spark has. Every
    task has a fixed cost (~20-50 ms), so fewer than the 12 topic-partitions; two per core
    even out their sizes."""
    return 2 * spark.sparkContext.defaultParallelism


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
    log.info("telemetry source chosen", extra={"source": source, "topics": list(topics)})
    if source == SPARK_SOURCE:
        reader = (
            spark.readStream.format(SPARK_SOURCE)
            .option("kafka.bootstrap.servers", access.bootstrap)
            .option("subscribe", ",".join(topics))
            .option("startingOffsets", starting_offsets)
            .options(**access.spark_options, **(kafka_options or {}))
        )
        if max_records_per_batch:
            reader = reader.option("maxOffsetsPerTrigger", str(max_records_per_batch))
    elif source == PYTHON_SOURCE:
        spark.dataSource.register(FleetwatchKafkaDataSource)
        reader = (
            spark.readStream.format(SHORT_NAME)
            .option("bootstrap_servers", access.bootstrap)
            .option("topics", ",".join(topics))
            .option("starting_offsets", starting_offsets)
            .options(**{CLIENT_OPTION + name: str(value) for name, value in access.client_settings.items()})
        )
        if max_records_per_batch is not None:
            reader = reader.option("max_records_per_batch", str(max_records_per_batch))
        reader = reader.option("max_partitions", str(_read_tasks(spark)))
    else:
        raise ValueError(f"source must be {SPARK_SOURCE} or {PYTHON_SOURCE}, got {source!r}")
    # Spark's kafka source has binary key/value; the cast is a no-op for the Python source.
    df = reader.load()
    return df.select(
        F.col("key").cast("string").alias("key"),
        F.col("value").cast("string").alias("value"),
        *COLUMNS[2:],
    )
