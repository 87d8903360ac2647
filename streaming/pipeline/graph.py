"""The pipeline's Spark graph: the parse stage's rows -> event-time watermark -> detection's first pass
per bucket, its one stateful operator. (The second pass runs in the job's driver, over each
micro-batch's output: streaming/detect/second_pass.py.)"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from streaming.config import RuleBook
from streaming.pipeline.parse import counting_messages
from streaming.pipeline.state import OUTPUT_SCHEMA, DetectorProcessor
from streaming.records.job_output import Kind

__all__ = ["DETECTION_WATERMARK", "build_pipeline"]

# The observed metric (Spark's `observe`) of the pipeline's output that carries detection's watermark
# after each micro-batch: `{"ms": <the largest watermark row>}`, read by the job's progress.
DETECTION_WATERMARK = "detection_watermark"


def build_pipeline(parsed: DataFrame, book: RuleBook, buckets: int, cap: int | None) -> DataFrame:
    """The parse stage's rows (PARSED_SCHEMA: `read_parsed_telemetry`, `read_parsed_recording`, parsed
    with the same rules and buckets) -> OUTPUT_SCHEMA rows, the first pass's hand-offs among them (the
    sink runs the second pass over them: streaming.detect.SecondPass); `buckets`: spark.state_buckets; `cap`:
    spark.max_records_per_batch, the cap the source plans micro-batches with (None: none)."""
    parsed = counting_messages(parsed)
    lateness = book.defaults.allowed_lateness_ms
    events = (
        parsed.withColumn("event_time", F.timestamp_millis(F.col("ts")))
        .withWatermark("event_time", f"{lateness} milliseconds")
        # Without the event-time column below the watermark, Spark no longer drops late rows
        # silently; the engine sees them and sends them to quarantine ("nothing is lost").
        # Detection keeps a watermark of its own (streaming/detect/bus_clock.py); Spark's stays for
        # its progress and the checkpoint's operators, which were written in event-time mode.
        .drop("event_time")
    )
    output = events.groupBy("bucket").transformWithStateInPandas(
        statefulProcessor=DetectorProcessor(book, buckets, cap),
        outputStructType=OUTPUT_SCHEMA,
        outputMode="Append",
        timeMode="EventTime",
    )
    # Detection's watermark after each batch, for the progress (the pipeline's lag, a replay's end).
    return output.observe(DETECTION_WATERMARK, F.max(F.when(F.col("kind") == Kind.WATERMARK, F.col("ts"))).alias("ms"))
