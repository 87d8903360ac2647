"""The rows every telemetry source yields (the Kafka readers and the JSONL file source alike): the
columns of Spark's `kafka` source, with key and value already strings, so the job downstream does
not know which source runs."""

from __future__ import annotations

__all__ = ["COLUMNS", "SCHEMA"]

COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp")
SCHEMA = "key STRING, value STRING, topic STRING, partition INT, offset LONG, timestamp TIMESTAMP"
