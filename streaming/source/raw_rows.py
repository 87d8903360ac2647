"""The rows every telemetry source yields (the Kafka readers and the JSONL file source alike): the
columns of Spark's `kafka` source, with key and value already strings, so the job downstream does
not know which source runs."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema

__all__ = ["ARROW_SCHEMA", "COLUMNS", "SCHEMA"]

# The readers yield Arrow record batches of this schema: Spark takes them column-wise, without
# converting each row in Python (tuples with a datetime each were ~6% slower end to end in the
# Kafka reader; the JSONL reader's tuples were 8% of a replay's Python samples).
ARROW_SCHEMA = pa.schema([
    ("key", pa.string()), ("value", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")),
])
COLUMNS = tuple(ARROW_SCHEMA.names)
SCHEMA = from_arrow_schema(ARROW_SCHEMA)  # the same rows as the data sources declare them to Spark
