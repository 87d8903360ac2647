"""The Python readers with the parse stage inside them: one Python worker per task reads and parses.

Over the `fleetwatch_kafka` source (and a replay's `fleetwatch_jsonl`), the parse stage ran in a
second Python worker beside each reading one, and every message crossed the JVM between them: Arrow
out of the reader, Spark's rows, Arrow again into the parse stage's worker (`parse_stage`). Here the
reading worker parses what it read itself (`parse_chunk`, in chunks of `chunk_rows` as Spark's
Arrow chunks were) and hands Spark the parse stage's rows (`PARSED_SCHEMA`); the graph takes them
as they are (`build_pipeline`).

The job's clock of the parse stage is the micro-batch's planning time, as with `parse_stage`
(there Spark's `current_timestamp()`): the driver stamps each batch's end offset with it
(`PLANNED_MS`) when new data is there, so the offset log keeps it and a batch run again after a
crash decides the same. An end offset without it (a checkpoint written before) is read with the
driver's clock when the batch is planned again.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from streaming.config import RuleBook
from streaming.pipeline.parse import PARSED_SCHEMA, ParseSettings, parse_chunk, parse_stage
from streaming.plumbing import clock
from streaming.source import (
    FILE_TOPIC,
    PLANNED_MS,
    PYTHON_SOURCE,
    FleetwatchKafkaDataSource,
    JsonlFileSource,
    JsonlStreamReader,
    KafkaReaderOptions,
    KafkaStreamReader,
    line_text,
    record_text,
)

if TYPE_CHECKING:
    from streaming.bus import BusAccess

__all__ = ["PARSING_FILE_SOURCE", "PARSING_SOURCE", "ParsingJsonlReader", "ParsingJsonlSource",
           "ParsingKafkaDataSource", "ParsingStreamReader", "read_parsed_recording", "read_parsed_telemetry"]

_Offsets = dict[str, Any]  # the reader's offsets (streaming/source/kafka_offsets.py), with PLANNED_MS
PARSING_SOURCE = "fleetwatch_kafka_parsed"
PARSING_FILE_SOURCE = "fleetwatch_jsonl_parsed"
# The data source options of the parse settings (`ParseSettings`' fields) and of the chunk size.
_SETTING = "parse."
_CHUNK_ROWS = "parse.chunk_rows"


class _PlannedPartition(InputPartition):
    """A range (or group of ranges) of the reader, with the planning time of its micro-batch."""

    def __init__(self, inner: InputPartition, planned_ms: int) -> None:
        self.inner, self.planned_ms = inner, planned_ms

    def __repr__(self) -> str:
        return f"{self.inner!r} planned at {self.planned_ms}"


class _PlannedParsing(DataSourceStreamReader):
    """What both readers that parse add to theirs (the next class of the reader's MRO): the
    planning stamp of each batch's end offset, its partitions planned with it, the chunked parse."""

    settings: ParseSettings
    chunk_rows: int
    _last_latest: _Offsets | None = None

    def latestOffset(self) -> _Offsets:
        self._last_latest = _stamped(super().latestOffset(), self._last_latest)
        return self._last_latest

    def partitions(self, start: _Offsets, end: _Offsets) -> Sequence[InputPartition]:
        return _planned(super().partitions(start, end), end)

    def _parsed(self, pieces: Iterator[tuple[list[Any], ...]], planned_ms: int) -> Iterator[pa.RecordBatch]:
        """The parse stage's rows of the messages of `pieces` (topics, partitions, offsets, values), in
        chunks of about `chunk_rows` (at least, but the last): heartbeats are thinned per chunk."""
        bucket_by_shard: dict[str, int] = {}
        columns: tuple[list[Any], ...] = ([], [], [], [])
        for piece in pieces:
            for column, values in zip(columns, piece, strict=True):
                column.extend(values)
            if len(columns[0]) >= self.chunk_rows:
                yield parse_chunk(self.settings, bucket_by_shard, planned_ms, *columns)
                columns = ([], [], [], [])
        if columns[0]:
            yield parse_chunk(self.settings, bucket_by_shard, planned_ms, *columns)


class ParsingStreamReader(_PlannedParsing, KafkaStreamReader):
    """`KafkaStreamReader` whose executors yield the parse stage's rows (PARSED_SCHEMA)."""

    def __init__(self, options: KafkaReaderOptions, settings: ParseSettings, chunk_rows: int) -> None:
        KafkaStreamReader.__init__(self, options)
        self.settings, self.chunk_rows = settings, chunk_rows

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _PlannedPartition)
        pieces = (([r.topic for r in records], [r.partition for r in records], [r.offset for r in records],
                   [record_text(r.value) for r in records])
                  for records in self.read_records(partition.inner))
        return self._parsed(pieces, partition.planned_ms)


class ParsingJsonlReader(_PlannedParsing, JsonlStreamReader):
    """`JsonlStreamReader` (a replay's recorded file) whose executors yield the parse stage's rows."""

    def __init__(self, path: str, max_lines: int, settings: ParseSettings, chunk_rows: int) -> None:
        JsonlStreamReader.__init__(self, path, max_lines)
        self.settings, self.chunk_rows = settings, chunk_rows

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _PlannedPartition)
        pieces = (([FILE_TOPIC] * len(lines), [0] * len(lines), list(range(first, first + len(lines))),
                   [line_text(line) for line in lines])
                  for first, lines in self.read_lines(partition.inner))
        return self._parsed(pieces, partition.planned_ms)


def _stamped(latest: _Offsets, last: _Offsets | None) -> _Offsets:
    """`latest` stamped with the planning time, or the last offsets returned when nothing moved:
    Spark runs a batch whenever the latest offset differs from the last batch's end, so an
    unchanged stamp keeps an idle stream idle."""
    if last is not None and {key: value for key, value in last.items() if key != PLANNED_MS} == latest:
        return last
    return {**latest, PLANNED_MS: clock.now_ms()}


def _planned(partitions: Sequence[InputPartition], end: _Offsets) -> list[InputPartition]:
    """The batch's partitions with the planning time its end offset keeps (or the clock now, for
    an end offset written before the stamp)."""
    planned = end.get(PLANNED_MS)
    planned_ms = int(planned) if planned is not None else clock.now_ms()
    return [_PlannedPartition(inner, planned_ms) for inner in partitions]


def _settings(options: Mapping[str, str]) -> tuple[ParseSettings, int]:
    """The parse settings and the chunk size a parsing reader's data source options carry."""
    settings = ParseSettings(**{name: int(options[_SETTING + name]) for name in ParseSettings.__dataclass_fields__})
    return settings, int(options[_CHUNK_ROWS])


def _options(spark: SparkSession, book: RuleBook, buckets: int) -> dict[str, str]:
    settings = ParseSettings.of(book, buckets)
    options = {_SETTING + name: str(getattr(settings, name)) for name in ParseSettings.__dataclass_fields__}
    # As Spark chunked the readers' rows into the parse stage's worker (streaming/job/session.py).
    options[_CHUNK_ROWS] = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    return options


class ParsingKafkaDataSource(FleetwatchKafkaDataSource):
    """`spark.readStream.format("fleetwatch_kafka_parsed")`: Kafka topics, read and parsed."""

    @classmethod
    def name(cls) -> str:
        return PARSING_SOURCE

    def schema(self) -> StructType:
        return PARSED_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return ParsingStreamReader(KafkaReaderOptions.parse(self.options), *_settings(self.options))


class ParsingJsonlSource(JsonlFileSource):
    """`spark.readStream.format("fleetwatch_jsonl_parsed")`: a recorded JSONL file, read and parsed."""

    @classmethod
    def name(cls) -> str:
        return PARSING_FILE_SOURCE

    def schema(self) -> StructType:
        return PARSED_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        plain = super().streamReader(schema)
        assert isinstance(plain, JsonlStreamReader)
        return ParsingJsonlReader(plain.path, plain.max_lines, *_settings(self.options))


def read_parsed_telemetry(spark: SparkSession, bus: str | BusAccess, topics: Sequence[str], book: RuleBook,
                          buckets: int, max_records_per_batch: int | None = None, *, source: str = PYTHON_SOURCE,
                          kafka_options: dict[str, str] | None = None) -> DataFrame:
    """The telemetry of `topics` on `bus` as the parse stage's rows (PARSED_SCHEMA), read by `source`
    (`choose_source`): the Python reader parses as it reads, in one worker per task; Spark's connector
    (with `kafka_options`, such as `failOnDataLoss`) hands its rows to `parse_stage`."""
    # Imported here: Spark's Python workers import this module for the reader, not the driver's side.
    from streaming.source import python_reader, read_telemetry

    if source != PYTHON_SOURCE:
        raw = read_telemetry(spark, bus, topics, source=source, max_records_per_batch=max_records_per_batch,
                             kafka_options=kafka_options)
        return parse_stage(raw, book, buckets)
    reader = python_reader(spark, bus, topics, max_records_per_batch=max_records_per_batch,
                           data_source=ParsingKafkaDataSource)
    return reader.options(**_options(spark, book, buckets)).load()


def read_parsed_recording(spark: SparkSession, path: str | Path, book: RuleBook, buckets: int,
                          lines_per_partition: int) -> DataFrame:
    """A recorded JSONL file (`fleetwatch replay`) as the parse stage's rows, read and parsed in one
    worker per range of `lines_per_partition` lines."""
    spark.dataSource.register(ParsingJsonlSource)
    return (spark.readStream.format(PARSING_FILE_SOURCE).option("path", str(path))
            .option("lines_per_partition", str(lines_per_partition))
            .options(**_options(spark, book, buckets)).load())
