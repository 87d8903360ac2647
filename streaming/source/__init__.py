"""The source stage: the raw telemetry messages as a streaming DataFrame, from the Kafka bus
(Spark's `kafka` connector or the project's reader over kafka-python, `telemetry` chooses) or from
one recorded JSONL file (`fleetwatch replay`). Every source yields the rows of `raw_rows`.

Names are loaded on first use: Spark starts a Python process for each planning step of a data
source (look-up, creation, read planning, the streaming runner), and each imports the reader it
plans through this package; the JSONL reader's must not load the Kafka client, the bus or the
store (0.4 s of CPU per process)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from streaming.plumbing.lazy_names import load_on_first_use

if TYPE_CHECKING:
    from streaming.source.bus_loss import MESSAGES_READ, PLANNED_MS, messages_read, records_lost, topics_changed
    from streaming.source.jsonl_reader import FILE_TOPIC, JsonlFileSource, JsonlStreamReader, line_text
    from streaming.source.kafka_offsets import allocate
    from streaming.source.kafka_options import (
        DEFAULT_MAX_RECORDS_PER_BATCH,
        KafkaReaderOptions,
        KafkaSourceError,
    )
    from streaming.source.kafka_ranges import RangeGroup, TopicPartitionRange
    from streaming.source.kafka_reader import FleetwatchKafkaDataSource, KafkaStreamReader, record_text
    from streaming.source.raw_rows import COLUMNS
    from streaming.source.telemetry import (
        PYTHON_SOURCE,
        SPARK_SOURCE,
        choose_source,
        jvm_kafka_available,
        python_reader,
        read_telemetry,
    )

__all__ = [
    "COLUMNS",
    "DEFAULT_MAX_RECORDS_PER_BATCH",
    "FILE_TOPIC",
    "MESSAGES_READ",
    "PLANNED_MS",
    "PYTHON_SOURCE",
    "SPARK_SOURCE",
    "FleetwatchKafkaDataSource",
    "JsonlFileSource",
    "JsonlStreamReader",
    "KafkaReaderOptions",
    "KafkaSourceError",
    "KafkaStreamReader",
    "RangeGroup",
    "TopicPartitionRange",
    "allocate",
    "choose_source",
    "jvm_kafka_available",
    "line_text",
    "messages_read",
    "python_reader",
    "read_telemetry",
    "record_text",
    "records_lost",
    "topics_changed",
]

_HOME = {
    **dict.fromkeys(("MESSAGES_READ", "PLANNED_MS", "messages_read", "records_lost", "topics_changed"), "bus_loss"),
    **dict.fromkeys(("FILE_TOPIC", "JsonlFileSource", "JsonlStreamReader", "line_text"), "jsonl_reader"),
    "allocate": "kafka_offsets",
    **dict.fromkeys(("DEFAULT_MAX_RECORDS_PER_BATCH", "KafkaReaderOptions", "KafkaSourceError"), "kafka_options"),
    **dict.fromkeys(("RangeGroup", "TopicPartitionRange"), "kafka_ranges"),
    **dict.fromkeys(("FleetwatchKafkaDataSource", "KafkaStreamReader", "record_text"), "kafka_reader"),
    "COLUMNS": "raw_rows",
    **dict.fromkeys(("PYTHON_SOURCE", "SPARK_SOURCE", "choose_source", "jvm_kafka_available", "python_reader",
                     "read_telemetry"), "telemetry"),
}

__getattr__ = load_on_first_use(__name__, _HOME)
