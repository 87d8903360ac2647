"""The replay's query: a recorded JSONL file in, through the live job's pipeline, to a writer.

The file is read by a streaming source that parses as it reads, as the Python Kafka reader does
(streaming/pipeline/parsing_reader.py), so the same Spark wiring and the same engines run.
`Recording.finished` says when the query is done: every line read, in batches that are done. The end
of the file is not silence: a deadline falls due only once detection's watermark (the largest event
time minus the allowed lateness, once every line is read) passes it, in the batch that reads the
last line (streaming/detect/bus_clock.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from streaming.config import FleetwatchConfig
from streaming.job.progress import QueryStats
from streaming.job.query import RunningQuery, start_query
from streaming.pipeline import read_parsed_recording
from streaming.store import Store

__all__ = ["REPLAY_QUERY", "Recording", "start_recorded_query"]

REPLAY_QUERY = "fleetwatch_replay"


@dataclass(frozen=True)
class Recording:
    """A recorded events file and its number of lines (what the query must read)."""

    path: Path
    lines: int

    @classmethod
    def of(cls, path: str | Path) -> Recording:
        with Path(path).open("rb") as fh:
            return cls(Path(path), sum(1 for _ in fh))

    def finished(self) -> Callable[[QueryStats], bool]:
        """Whether a replay's progress says it is done (module docstring)."""

        def done(stats: QueryStats) -> bool:
            return stats.input_rows >= self.lines

        return done


def start_recorded_query(spark: SparkSession, config: FleetwatchConfig, recording: Recording,
                         writer: Callable[[DataFrame, int], Any], *, checkpoint: str,
                         store: Store | None) -> RunningQuery:
    """Start the pipeline over `recording` into `writer`, as query `REPLAY_QUERY`, as fast as it reads."""
    telemetry = read_parsed_recording(spark, recording.path, config.rule_book(), config.spark.state_buckets,
                                      lines_per_partition=config.spark.max_records_per_batch)
    return start_query(spark, config, telemetry, writer, name=REPLAY_QUERY, checkpoint=checkpoint, trigger="0 seconds",
                       store=store)
