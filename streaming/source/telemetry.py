"""The telemetry stream: Spark's `kafka` source when its connector is present, else ours.

Both paths yield the same columns and types (`kafka_reader.SCHEMA`), so the job downstream
does not know which one runs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from streaming.source.kafka_reader import SHORT_NAME, FleetwatchKafkaDataSource

__all__ = ["COLUMNS", "jvm_kafka_available", "read_telemetry"]

log = logging.getLogger(__name__)

COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp")
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


def _read_tasks(spark: SparkSession) -> int:
    """How many tasks read a micro-batch of the Python source: two per core Spark has. Every
    task has a fixed cost (~20-50 ms), so fewer than the 12 topic-partitions; two per core
    even out their sizes."""
    return 2 * spark.sparkContext.defaultParallelism


def read_telemetry(
    spark: SparkSession,
    bootstrap_servers: str,
    topics: Sequence[str],
    starting_offsets: str = "earliest",
    max_records_per_batch: int | None = None,
) -> DataFrame:
    """A streaming DataFrame of the raw telemetry messages of `topics`.

    Columns: key STRING, value STRING, topic STRING, partition INT, offset LONG,
    timestamp TIMESTAMP (the Kafka record timestamp). `max_records_per_batch`: None is the
    source's default (the Python source caps at `DEFAULT_MAX_RECORDS_PER_BATCH`, the JVM
    source is unbounded), 0 is no cap. The Python source reads each micro-batch in two tasks
    per core (the JVM source in one per topic-partition).
    """
    if starting_offsets not in ("earliest", "latest"):
        raise ValueError(f"starting_offsets must be earliest or latest, got {starting_offsets!r}")
    if not topics:
        raise ValueError("read_telemetry needs at least one topic")
    use_jvm = jvm_kafka_available(spark)
    log.info(
        "telemetry source chosen",
        extra={"source": "kafka" if use_jvm else SHORT_NAME, "topics": list(topics)},
    )
    if use_jvm:
        reader = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap_servers)
            .option("subscribe", ",".join(topics))
            .option("startingOffsets", starting_offsets)
        )
        if max_records_per_batch:
            reader = reader.option("maxOffsetsPerTrigger", str(max_records_per_batch))
    else:
        spark.dataSource.register(FleetwatchKafkaDataSource)
        reader = (
            spark.readStream.format(SHORT_NAME)
            .option("bootstrap_servers", bootstrap_servers)
            .option("topics", ",".join(topics))
            .option("starting_offsets", starting_offsets)
        )
        if max_records_per_batch is not None:
            reader = reader.option("max_records_per_batch", str(max_records_per_batch))
        reader = reader.option("max_partitions", str(_read_tasks(spark)))
    # Spark's kafka source has binary key/value; the cast is a no-op for the Python source.
    df = reader.load()
    return df.select(
        F.col("key").cast("string").alias("key"),
        F.col("value").cast("string").alias("value"),
        *COLUMNS[2:],
    )
