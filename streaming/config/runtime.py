"""Where the job runs: the telemetry bus (`bus:`), the store and its retention (`store:`), and Spark with
its query's restarts (`spark:`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictInt, model_validator

from streaming.config.bounds import MAX_DAYS, MAX_DURATION_MS, Strict
from streaming.config.fleet import SecurityConfig

__all__ = ["BusConfig", "RestartSettings", "RetentionConfig", "SparkConfig", "StoreConfig"]


class BusConfig(Strict):
    # None: the embedded Tansu broker, started by the project.
    bootstrap_servers: str | None = None
    partitions: int = Field(1, ge=1, le=10_000)
    # How every fleetwatch client reaches the bus (job, probe, simulator, alert publisher).
    security: SecurityConfig = Field(default_factory=SecurityConfig)
    # Which source reads the bus: Spark's kafka connector (`spark`, the production path), the
    # project's Python reader (`python`), or `auto`: the connector for a configured bus when it
    # is on the classpath and the bus answers ListOffsets(LATEST) with the high watermark (checked
    # by behaviour, streaming/bus/listoffsets.py), else the Python reader. A checkpoint keeps the
    # source it was started with (streaming/source/telemetry.py). A Tansu bus (the embedded
    # broker's, or configured by address) is read by `python`: Spark's source trusts Tansu's wrong
    # ListOffsets answers, so `spark` on such a bus is refused.
    source: Literal["auto", "spark", "python"] = "auto"
    # Spark's source only: stop the query when the bus deleted records the job had not read yet
    # (retention outran a stopped job). False: log it and go on, as the Python reader does.
    fail_on_data_loss: bool = False


class RetentionConfig(Strict):
    """Days the job keeps what it writes (deploy/README.md, "Retention"; finite, at most MAX_DAYS: `.inf` overflowed
    the cutoff), deleted every `every_batches` batches, `max_rows_per_table` per table; the quarantine's bounds."""

    history_days: float = Field(30, gt=0, le=MAX_DAYS, allow_inf_nan=False)  # alert_history, transitions, controller
    resolved_alerts_days: float = Field(30, gt=0, le=MAX_DAYS, allow_inf_nan=False)  # alerts once resolved
    quarantine_days: float = Field(7, gt=0, le=MAX_DAYS, allow_inf_nan=False)
    progress_days: float = Field(2, gt=0, le=MAX_DAYS, allow_inf_nan=False)  # pipeline_progress: ~86k rows a day
    subjects_days: float = Field(30, gt=0, le=MAX_DAYS, allow_inf_nan=False)  # subjects (and sources) not heard of
    every_batches: int = Field(100, ge=1, le=1_000_000)
    max_rows_per_table: int = Field(5000, ge=1, le=10_000_000)
    quarantine_rows_per_reason: int = Field(100, ge=1, le=100_000)  # of a micro-batch; the rest counted (issue 42)
    quarantine_max_rows: int = Field(50_000, ge=100, le=100_000_000)  # the oldest go beyond (store/quarantine_bounds)


class StoreConfig(Strict):
    url: str = Field("sqlite:///var/fleetwatch.db", repr=False)  # left out of repr: it may hold a password
    retention: RetentionConfig = Field(default_factory=RetentionConfig)


class RestartSettings(Strict):
    """How `fleetwatch run` restarts its streaming query when it fails (streaming/job/supervise.py):
    from its checkpoint, in the same Spark session, after a delay that doubles from `first_delay_ms`
    up to `max_delay_ms` and starts over once the query ran `healthy_after_ms` without failing.
    `give_up_after` failures within `give_up_window_ms` end `run` with exit 1, for the process's
    own supervisor (Kubernetes, systemd) to start it afresh."""

    first_delay_ms: StrictInt = Field(1000, gt=0, le=MAX_DURATION_MS)
    max_delay_ms: StrictInt = Field(60_000, gt=0, le=MAX_DURATION_MS)
    healthy_after_ms: StrictInt = Field(300_000, gt=0, le=MAX_DURATION_MS)
    give_up_after: StrictInt = Field(10, ge=1, le=10_000)
    give_up_window_ms: StrictInt = Field(600_000, gt=0, le=MAX_DURATION_MS)
    # A query whose micro-batch runs this long, or whose execution thread died without failing it
    # (a JVM Error such as StackOverflowError is not caught by Spark), is stuck: it is stopped and
    # restarted as a failed one. Longer than the slowest first batch of a backlog.
    stalled_after_ms: StrictInt = Field(600_000, ge=10_000, le=MAX_DURATION_MS)

    @model_validator(mode="after")
    def _delays_grow(self) -> RestartSettings:
        if self.max_delay_ms < self.first_delay_ms:
            raise ValueError(f"max_delay_ms ({self.max_delay_ms}) must be at least first_delay_ms "
                             f"({self.first_delay_ms})")
        return self


class SparkConfig(Strict):
    master: str = "local[*]"
    checkpoint_dir: str = "var/checkpoint"
    # A warning waits for the next micro-batch: at 250 ms a small fleet's stalled broker is stored about
    # 0.45 s after the probe read it, at 500 ms 0.6-0.75 s, at 1000 ms 0.7-0.8 s (README, "How soon"); a
    # batch of a small fleet costs ~0.25 CPU s, so 250 ms keeps most of a core busy for it.
    trigger_ms: int = Field(250, ge=0, le=3_600_000)
    # Tasks of each detection pass: one per core (on a cluster, the executors' total cores).
    shuffle_partitions: int = Field(2, ge=1, le=10_000)
    max_records_per_batch: int = Field(200000, gt=0, le=100_000_000)
    # Detection state is kept per bucket of shards, in each pass (see streaming/pipeline/state.py): each
    # bucket costs a fixed ~10 ms per micro-batch, and buckets bound the detection's parallelism
    # (give a cluster a few per core). Fixed for the life of a checkpoint: the job refuses state
    # written with another count.
    state_buckets: int = Field(16, ge=1, le=4096)
    # JVM options of the Spark driver (the JVM fleetwatch starts itself, or submit.sh's spark-submit)
    # and of the executors on a cluster ("": the JVM's defaults). The JIT stops at its first tier:
    # the JVMs only move rows between Kafka, Arrow and the Python workers; C2's compiling was 42% of
    # the driver's CPU in a replay (bench/replay_vs_reference.py: 22.7 -> 13.1 CPU s) and most of
    # the executors' on a standalone cluster (tests/ops/test_deploy_standalone.py), throughput unchanged.
    # The driver's JVM collects with the serial collector: G1 grew its heap to 0.8-1.0 GB on a backlog
    # and kept it (it gives memory back only after a concurrent cycle, which a heap of short-lived rows
    # seldom starts); the serial one held at most 470 MB, and the JVM of the live job after a backlog
    # 1.04-1.14 GB PSS instead of 1.29-1.77 (1,000 x 12; bench/throughput.py's phases, issue 45), for
    # about the same CPU. That is for Spark's default driver heap of 1 GB; a driver given several GB (spark-submit's
    # --driver-memory) is better off with G1. It also gives back what a backlog left: the heap shrinks at a
    # full collection to 30% free (MaxHeapFreeRatio; 70% by default, so the tenured space a backlog grew stayed),
    # and every 10 s the JVM hands glibc's free C heap back to the system (TrimNativeHeapInterval, Java 17.0.11
    # or later; for an older Java leave it out): ~130 MB of it after a backlog (`jcmd System.trim_native_heap`).
    # The JVM of the live job after a backlog: 0.79-0.88 GB PSS instead of 1.16-1.17, for no more CPU.
    driver_java_options: str = ("-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:MinHeapFreeRatio=10 "
                                "-XX:MaxHeapFreeRatio=30 -XX:TrimNativeHeapInterval=10000")
    executor_java_options: str = "-XX:TieredStopAtLevel=1"
    restarts: RestartSettings = Field(default_factory=RestartSettings)
