"""The Spark session the pipeline runs in, and where its checkpoint lives.

`spark_session` puts the Kafka connector on the classpath (`connector_jars`) and sets the
driver's JVM options when this process starts Spark itself, and the executors'
(`context_settings`); `checkpoint_path`/`checkpoint_id` name a query's checkpoint and read the
query id Spark keeps in it; `claim_checkpoint` marks a new checkpoint with the layout of this
job's detection state, says in one line that a checkpoint of an older layout cannot be continued,
and gives the time mode and the bucket keys the checkpoint's stateful operator runs with
(`CheckpointLayout`).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pyspark.sql import SparkSession

from streaming.config import ConfigError, FleetwatchConfig
from streaming.job.prepared import class_archive
from streaming.pipeline import bucket_count_changed, spread_bucket_keys
from streaming.plumbing.jars import connector_jars

__all__ = ["CHECKPOINT_LAYOUT", "CheckpointLayout", "checkpoint_id", "checkpoint_path", "claim_checkpoint",
           "context_settings", "spark_session"]

# The layout of the detection state in a checkpoint of this job, in the file `_LAYOUT_FILE` beside
# Spark's own: the first pass in Spark's one stateful operator, the second pass's state in the store
# (streaming/detect/second_pass.py), the operator's time mode (streaming/pipeline/graph.py,
# OPERATOR_TIME_MODES) and its key of each bucket (streaming/pipeline/bucket_keys.py): `CHECKPOINT_LAYOUT`,
# then `_BUCKET_KEYS` and the keys. Checkpoints of the layouts before it have no such file; those marked by
# versions up to 2026-11-30 have the first line alone, and their operator keeps the event-time mode it was
# registered in (Spark refuses a restart that changes it); those marked up to 2026-12-01 have the first
# two lines, and keep their bucket numbers as keys (the state's keys).
_PASSES = "fleetwatch detection state: first pass in the checkpoint, second pass in the store\n"
CHECKPOINT_LAYOUT = f"{_PASSES}stateful operator's time mode: None\n"
_BUCKET_KEYS = "stateful operator's bucket keys: "
_LAYOUT_FILE = "fleetwatch-layout"


@dataclass(frozen=True)
class CheckpointLayout:
    """What a checkpoint's stateful operator runs with, as `build_pipeline` takes it: its time mode, and
    its key of each bucket (None: the bucket numbers)."""

    time_mode: str
    bucket_keys: tuple[int, ...] | None

    @classmethod
    def new(cls, buckets: int, partitions: int) -> CheckpointLayout:
        """A new checkpoint's: its buckets' keys spread over the shuffle `partitions` it starts with."""
        return cls("None", spread_bucket_keys(buckets, partitions))

    def text(self) -> str:
        """The layout file's text (only this job's own layout: time mode None)."""
        return f"{CHECKPOINT_LAYOUT}{_BUCKET_KEYS}{','.join(map(str, self.bucket_keys or ()))}\n"


def _launch_settings(config: FleetwatchConfig) -> dict[str, str]:
    """What only the launch of the driver's JVM takes, when this process starts Spark itself:
    `spark.jars` with Spark's kafka connector as `make jars` fetched it, and the driver's JVM
    options, with the class archive `make` made for this Spark and Java when there is one.
    Under spark-submit the JVM is already up with its own `--jars` and options
    (PYSPARK_GATEWAY_PORT is set), and a `spark.jars` of ours would replace them."""
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        return {}
    settings = {}
    jars = connector_jars()
    if jars:
        settings["spark.jars"] = ",".join(str(jar) for jar in jars)
    options = config.spark.driver_java_options
    archive = class_archive()
    if archive is not None and archive.is_file():
        options = f"{options} -XX:SharedArchiveFile={archive}".strip()  # made by `make` (streaming/job/startup.py)
    if options:
        settings["spark.driver.extraJavaOptions"] = options
    return settings


# Spark's checkpoint file manager over Hadoop's FileSystem, not FileContext. On a local disk,
# FileContext's rename forks `readlink` for the file and its checksum (Hadoop's local file system
# has no native library here): ~50 processes a micro-batch, whatever it held (JFR of the live
# job). FileSystem's rename is one rename(2), atomic on a local disk. A checkpoint on HDFS or an
# object store keeps Spark's default.
_LOCAL_CHECKPOINT_FILES = "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"


def _checkpoint_settings(config: FleetwatchConfig) -> dict[str, str]:
    scheme = urlsplit(config.spark.checkpoint_dir).scheme
    if scheme in ("", "file"):
        return {"spark.sql.streaming.checkpointFileManagerClass": _LOCAL_CHECKPOINT_FILES}
    return {}


def context_settings(config: FleetwatchConfig) -> dict[str, str]:
    """What the SparkContext takes, which this process creates even under spark-submit (the JVM
    is up, the context is not): the executors' JVM options, when the config has them."""
    options = config.spark.executor_java_options
    return {"spark.executor.extraJavaOptions": options} if options else {}


def spark_session(config: FleetwatchConfig, app_name: str = "fleetwatch") -> SparkSession:
    # Workers must start with this interpreter (it has pyarrow and the project installed).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    settings = {**_launch_settings(config), **context_settings(config), **_checkpoint_settings(config)}
    spark = (
        SparkSession.builder.config(map=settings)
        .appName(app_name)
        .master(config.spark.master)
        .config("spark.sql.shuffle.partitions", str(config.spark.shuffle_partitions))
        .config("spark.sql.streaming.stateStore.providerClass",
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
        # Commit a micro-batch's state changes as a changelog instead of a new RocksDB snapshot.
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        .config("spark.ui.enabled", "false")
        # The console progress bar would interleave with the structured log lines on stderr.
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        # Imports the job's modules once per executor and keeps pyspark's bytecode cached.
        .config("spark.python.daemon.module", "streaming.job.spark_daemon")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        # Spark keeps one pool of Python workers per set of worker environment variables, and it
        # sets SPARK_SIMPLIFIED_TRACEBACK for the parse stage's and the readers' workers but not
        # for the stateful operator's. Off, both stages share one pool: at 1,000 x 12 that is 4
        # workers instead of 6 and one daemon instead of two (bench/throughput.py, peak RSS).
        # A worker's traceback then keeps pyspark's own frames too.
        .config("spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled", "false")
        # Bigger Arrow chunks into the parse stage: heartbeats are thinned per chunk, and a
        # chunk of 10,000 rows (the default) held only ~3 heartbeats per broker at 1,000 clusters.
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "100000")
        # Interpreted expressions, not Java generated per plan. A streaming query plans every
        # micro-batch anew, and the stateful operator builds its state encoders on each copy of
        # its plan node and in each task: generating their code was ~30% of the JVM's CPU in a
        # micro-batch, whatever it held (bench/batch_cost.py), while the rows between Kafka, Arrow
        # and the Python workers are few columns and cheap to interpret (bench/replay_vs_reference.py's
        # big batches ran as fast).
        .config("spark.sql.codegen.wholeStage", "false")
        .config("spark.sql.codegen.factoryMode", "NO_CODEGEN")
        # No micro-batch without data: Spark runs one after every batch whose watermark moved, to fire
        # event-time timers, but detection fires its deadlines by its own watermark in the batch that
        # moves it (streaming/detect/bus_clock.py), and a batch without data moves nothing: it was
        # the fixed cost of a micro-batch twice over for nothing (issue 45).
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    _quiet_expected_warnings(spark)
    return spark


# Spark loggers whose WARN lines say nothing is wrong with the job.
_EXPECTED_WARNINGS = (
    # "Value state bucket doesn't contain a value", once for every new bucket: the detection stage
    # reads its state with one get(), which answers None for a new bucket (pipeline/state.py).
    "org.apache.spark.sql.execution.python.streaming.TransformWithStateInPySparkStateServer",
)


def _quiet_expected_warnings(spark: SparkSession) -> None:
    jvm = spark.sparkContext._jvm
    error = jvm.org.apache.logging.log4j.Level.ERROR
    for logger in _EXPECTED_WARNINGS:
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(logger, error)


def checkpoint_path(config: FleetwatchConfig, name: str) -> str:
    # Plain string joining: Path() would turn an object-store URL (s3a://b/x) into s3a:/b/x.
    return f"{config.spark.checkpoint_dir.rstrip('/')}/{name}"


def _on_hadoop(spark: SparkSession, path: str) -> tuple[Any, Any]:
    """Hadoop's file system of `path`, and the path (a checkpoint can live on HDFS or an object store)."""
    hadoop_path = spark._jvm.org.apache.hadoop.fs.Path(path)
    return hadoop_path.getFileSystem(spark._jsc.hadoopConfiguration()), hadoop_path


def _exists(spark: SparkSession, path: str) -> bool:
    fs, hadoop_path = _on_hadoop(spark, path)
    return bool(fs.exists(hadoop_path))


def _committed(spark: SparkSession, root: str) -> bool:
    """Whether Spark committed a micro-batch of the checkpoint (it keeps the newest commits only)."""
    fs, commits = _on_hadoop(spark, f"{root}/commits")
    return bool(fs.exists(commits)) and any(not status.getPath().getName().startswith(".")
                                            for status in fs.listStatus(commits))


def claim_checkpoint(spark: SparkSession, location: str, buckets: int, partitions: int) -> CheckpointLayout:
    """Mark a checkpoint new to this job with its layout (`CheckpointLayout.text`: its bucket keys spread
    over `partitions`, the shuffle partitions it starts with); refuse, in one line that says what to do, one
    that Spark committed batches to with an older layout: of the job of one detection stage (before
    2026-11-26), or of two stateful passes (until 2026-11-29), whose second pass's state this job would
    not find (Spark would refuse the first in a Java stack trace, and could load the second's operators'
    state into the wrong pass); and one whose keys are not `buckets`' (spark.state_buckets changed). A
    checkpoint that committed nothing (a job that died in its first micro-batch) starts as a new one.
    Returns the layout the checkpoint's stateful operator runs with: the one it was marked with."""
    root = location.rstrip("/")
    fs, marker = _on_hadoop(spark, f"{root}/{_LAYOUT_FILE}")
    if fs.exists(marker):
        layout = _layout_of(_read_text(spark, fs, marker), location)
        if layout.bucket_keys is not None and len(layout.bucket_keys) != buckets:
            raise ConfigError(bucket_count_changed(len(layout.bucket_keys), buckets))
        return layout
    if _committed(spark, root):
        older = ("two stateful detection passes" if _exists(spark, f"{root}/state/1")
                 else "one detection stage")
        raise ConfigError(f"the checkpoint {location} was written by a fleetwatch with {older}, which this one "
                          "cannot continue: move it aside (or set spark.checkpoint_dir to a new directory) and start "
                          "again; the open alerts are then resolved or fired again as the new state catches up")
    layout = CheckpointLayout.new(buckets, partitions)
    stream = fs.create(marker, True)
    try:
        stream.write(bytearray(layout.text().encode()))
    finally:
        stream.close()
    return layout


def _layout_of(text: str, location: str) -> CheckpointLayout:
    if text == _PASSES:
        return CheckpointLayout("EventTime", None)
    if text == CHECKPOINT_LAYOUT:
        return CheckpointLayout("None", None)
    keys = text.removeprefix(CHECKPOINT_LAYOUT + _BUCKET_KEYS).removesuffix("\n").split(",")
    if text.startswith(CHECKPOINT_LAYOUT + _BUCKET_KEYS) and text.endswith("\n") and all(k.isdigit() for k in keys):
        return CheckpointLayout("None", tuple(int(key) for key in keys))
    raise ConfigError(f"the checkpoint {location} has a detection state layout this fleetwatch does not know "
                      f"(its {_LAYOUT_FILE} file): it was written by a newer one, or changed by hand")


def _read_text(spark: SparkSession, fs: Any, path: Any) -> str:
    stream = fs.open(path)
    try:
        return str(spark._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
    finally:
        stream.close()


def checkpoint_id(spark: SparkSession, location: str) -> str | None:
    """The id Spark keeps in a streaming checkpoint (the `metadata` file's `id`: the query id,
    the same across restarts), or None while the checkpoint is empty. Read through Hadoop's file
    system, so a checkpoint on HDFS or an object store works as a local one."""
    fs, path = _on_hadoop(spark, f"{location.rstrip('/')}/metadata")
    if not fs.exists(path):
        return None
    return str(json.loads(_read_text(spark, fs, path).splitlines()[0])["id"])
