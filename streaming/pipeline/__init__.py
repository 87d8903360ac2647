"""The pipeline graph that runs on Spark's workers: telemetry in, detection output rows out.

Its door, for the job that starts it (streaming.job), the Spark daemon, the benches and tests:
- `read_parsed_telemetry(spark, bus, topics, book, buckets, source=...)`, `read_parsed_recording(spark,
  path, ...)`: the parse stage's rows of the bus, read by the chosen source (the Python Kafka reader
  parses in its own worker, `parsing_reader`; Spark's connector feeds `parse_stage`), and of a
  recorded file (the replay's reader parses in its worker);
- `build_pipeline(parsed, book, buckets, cap, time_mode, bucket_keys)`: those rows -> rows of `OUTPUT_SCHEMA`,
  for a sink that runs the second pass over them first (streaming.sinks.BatchWriter with a SecondPass);
  `time_mode`: Spark's, of the stateful operator, "None" but in a checkpoint written in "EventTime";
  `bucket_keys`: the operator's key of each bucket, a new checkpoint's `spread_bucket_keys(buckets,
  partitions)` (one shuffle partition runs as many buckets as the next), None in one of older versions;
  `bucket_count_changed(stored, configured)`: the line that refuses a checkpoint of other buckets;
- `parse_stage(raw, book, buckets)` alone, `counting_messages(parsed)`; `bucket_of(shard, buckets)`;
- for the job's passes without Spark (streaming/workshop/passes.py): `parse_chunk(settings, ...)` with its
  `ParseSettings`, the stateful operator's `DetectorProcessor`.

Inside: `parse` (contract check, heartbeat thinning, routing to buckets) -> `state`
(DetectorProcessor, detection's first pass and the graph's one stateful operator: the cluster and
target shards per bucket; its rows carry the hand-offs that the second pass, run by the job's
driver over each micro-batch, takes: streaming.detect.SecondPass), wired by `graph`, which keys the
buckets as `bucket_keys` says. Who starts,
runs and stops it is streaming.job.

Names are loaded on first use: Spark's Python workers import the graph through this door, and
must not load what only the driver needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streaming.plumbing.lazy_names import load_on_first_use

if TYPE_CHECKING:
    from streaming.pipeline.bucket_keys import bucket_count_changed, spread_bucket_keys
    from streaming.pipeline.graph import DETECTION_WATERMARK, build_pipeline
    from streaming.pipeline.parse import ParseSettings, bucket_of, counting_messages, parse_chunk, parse_stage
    from streaming.pipeline.parsing_reader import (
        ParsingJsonlSource,
        ParsingKafkaDataSource,
        read_parsed_recording,
        read_parsed_telemetry,
    )
    from streaming.pipeline.state import OUTPUT_SCHEMA, DetectorProcessor

__all__ = ["DETECTION_WATERMARK", "OUTPUT_SCHEMA", "DetectorProcessor", "ParseSettings", "ParsingJsonlSource",
           "ParsingKafkaDataSource", "bucket_count_changed", "bucket_of", "build_pipeline", "counting_messages",
           "parse_chunk", "parse_stage", "read_parsed_recording", "read_parsed_telemetry", "spread_bucket_keys"]

_HOME = {
    **dict.fromkeys(("bucket_count_changed", "spread_bucket_keys"), "bucket_keys"),
    **dict.fromkeys(("DETECTION_WATERMARK", "build_pipeline"), "graph"),
    **dict.fromkeys(("ParseSettings", "bucket_of", "counting_messages", "parse_chunk", "parse_stage"), "parse"),
    **dict.fromkeys(("OUTPUT_SCHEMA", "DetectorProcessor"), "state"),
    **dict.fromkeys(("ParsingJsonlSource", "ParsingKafkaDataSource", "read_parsed_recording", "read_parsed_telemetry"),
                    "parsing_reader"),
}

__getattr__ = load_on_first_use(__name__, _HOME)
