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

__all__ = ["DETECTION_WATERMARK", "OPERATOR_TIME_MODES", "build_pipeline"]

# The observed metric (Spark's `observe`) of the pipeline's output that carries detection's watermark
# after each micro-batch: `{"ms": <the largest watermark row>}`, read by the job's progress.
DETECTION_WATERMARK = "detection_watermark"
# Spark's time mode of the stateful operator: "None", or "EventTime" for a checkpoint whose operator
# was registered so (by versions up to 2026-11-30), which Spark does not let a restart change.
# Detection fires its deadlines by its own watermark and registers no timer of Spark's, so "None"
# spares every task of the operator what Spark does to list expired timers: a timer state built per
# task, its encoders' code generated in the state server's thread (Spark's session settings do not
# reach that thread) and a round trip from the Python worker: 37 % of that thread's CPU samples (JFR),
# about 0.9 x a small batch's CPU (bench/batch_cost.py, 3 x 3 fleet; within the runs' noise).
OPERATOR_TIME_MODES = ("None", "EventTime")


def build_pipeline(parsed: DataFrame, book: RuleBook, buckets: int, cap: int | None,
                   time_mode: str = "None", bucket_keys: tuple[int, ...] | None = None) -> DataFrame:
    """The parse stage's rows (PARSED_SCHEMA: `read_parsed_telemetry`, `read_parsed_recording`, parsed
    with the same rules and buckets) -> OUTPUT_SCHEMA rows, the first pass's hand-offs among them (the
    sink runs the second pass over them: streaming.detect.SecondPass); `buckets`: spark.state_buckets; `cap`:
    spark.max_records_per_batch, the cap the source plans micro-batches with (None: none); `time_mode`:
    one of OPERATOR_TIME_MODES, and `bucket_keys`: the stateful operator's key of each bucket (None: the
    bucket numbers themselves; bucket_keys.py), both the checkpoint's (streaming.job.session.claim_checkpoint)."""
    if time_mode not in OPERATOR_TIME_MODES:
        raise ValueError(f"time_mode must be one of {OPERATOR_TIME_MODES}, not {time_mode!r}")
    if bucket_keys is not None and len(bucket_keys) != buckets:
        raise ValueError(f"{len(bucket_keys)} bucket keys for {buckets} buckets")
    parsed = counting_messages(parsed)
    lateness = book.defaults.allowed_lateness_ms
    events = (
        parsed.withColumn("event_time", F.timestamp_millis(F.col("ts")))
        .withWatermark("event_time", f"{lateness} milliseconds")
        # Without the event-time column below the watermark, Spark no longer drops late rows
        # silently; the engine sees them and sends them to quarantine ("nothing is lost").
        # Detection keeps a watermark of its own (streaming/detect/bus_clock.py); Spark's stays for
        # its progress.
        .drop("event_time")
    )
    if bucket_keys is not None:  # the parse stage's negative buckets are their own keys
        key = F.element_at(F.array(*(F.lit(k) for k in bucket_keys)), F.col("bucket") + 1)
        events = events.withColumn("bucket", F.when(F.col("bucket") >= 0, key).otherwise(F.col("bucket")).cast("int"))
    output = events.groupBy("bucket").transformWithStateInPandas(
        statefulProcessor=DetectorProcessor(book, buckets, cap),
        outputStructType=OUTPUT_SCHEMA,
        outputMode="Append",
        timeMode=time_mode,
    )
    # Detection's watermark after each batch, for the progress (the pipeline's lag, a replay's end).
    return output.observe(DETECTION_WATERMARK, F.max(F.when(F.col("kind") == Kind.WATERMARK, F.col("ts"))).alias("ms"))
