"""The source stage: the raw telemetry messages as a streaming DataFrame, from the Kafka bus
(Spark's `kafka` connector or the project's reader over kafka-python, `telemetry` chooses) or from
one recorded JSONL file (`fleetwatch replay`). Every source yields the rows of `raw_rows`."""

from streaming.source.jsonl_reader import FILE_TOPIC, JsonlFileSource
from streaming.source.kafka_options import (
    DEFAULT_MAX_RECORDS_PER_BATCH,
    KafkaReaderOptions,
    KafkaSourceError,
)
from streaming.source.kafka_ranges import RangeGroup, TopicPartitionRange
from streaming.source.kafka_reader import FleetwatchKafkaDataSource, KafkaStreamReader
from streaming.source.raw_rows import COLUMNS
from streaming.source.telemetry import (
    PYTHON_SOURCE,
    SPARK_SOURCE,
    choose_source,
    jvm_kafka_available,
    read_telemetry,
)

__all__ = [
    "COLUMNS",
    "DEFAULT_MAX_RECORDS_PER_BATCH",
    "FILE_TOPIC",
    "PYTHON_SOURCE",
    "SPARK_SOURCE",
    "FleetwatchKafkaDataSource",
    "JsonlFileSource",
    "KafkaReaderOptions",
    "KafkaSourceError",
    "KafkaStreamReader",
    "RangeGroup",
    "TopicPartitionRange",
    "choose_source",
    "jvm_kafka_available",
    "read_telemetry",
]
