"""A streaming data source over one recorded JSONL file, for `fleetwatch replay`.

It yields the same columns as the Kafka readers (topic "file", partition 0, offset = line
number), so replay runs the live job's pipeline unchanged. Offsets are line counts.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from pathlib import Path

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from streaming.source.raw_rows import ARROW_SCHEMA, SCHEMA

__all__ = ["FILE_TOPIC", "JsonlFileSource", "JsonlStreamReader", "line_text"]

FILE_TOPIC = "file"
_LINES_PER_BATCH = 20_000


class _Range(InputPartition):
    def __init__(self, start: int, end: int) -> None:
        self.start, self.end = start, end


class JsonlStreamReader(DataSourceStreamReader):
    """Plans one micro-batch of every line (offsets: `{"line": <lines read>}`), read in ranges."""

    def __init__(self, path: str, max_lines: int) -> None:
        self.path = path
        self.max_lines = max_lines
        self._total: int | None = None

    def _line_count(self) -> int:
        if self._total is None:
            with open(self.path, "rb") as fh:
                self._total = sum(1 for _ in fh)
        return self._total

    def initialOffset(self) -> dict:
        return {"line": 0}

    def latestOffset(self) -> dict:
        return {"line": self._line_count()}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        # Cut large files into ranges so a replay of millions of lines uses every core.
        first, last = int(start["line"]), int(end["line"])
        return [_Range(a, min(a + self.max_lines, last)) for a in range(first, last, self.max_lines)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return (_batch(chunk, first) for first, chunk in self.read_lines(partition))

    def read_lines(self, partition: InputPartition) -> Iterator[tuple[int, list[bytes]]]:
        """The lines of a range, as (number of the first, the lines as read) per chunk."""
        assert isinstance(partition, _Range)
        with open(self.path, "rb") as fh:
            lines = islice(fh, partition.start, partition.end)
            first = partition.start
            while chunk := list(islice(lines, _LINES_PER_BATCH)):
                yield first, chunk
                first += len(chunk)

    def commit(self, end: dict) -> None:
        pass


def line_text(raw: bytes) -> str:
    """A line as the message it holds: invalid UTF-8 replaced (the parser quarantines it), no line end."""
    return raw.decode("utf-8", errors="replace").rstrip("\r\n")


def _batch(lines: list[bytes], first: int) -> pa.RecordBatch:
    """Lines `first`, `first + 1`, ... as rows: no key, the line as the value, its number as the
    offset, the epoch as the (unused) timestamp."""
    n = len(lines)
    return pa.RecordBatch.from_arrays([
        pa.nulls(n, pa.string()),
        pa.array([line_text(raw) for raw in lines], pa.string()),
        pa.repeat(pa.scalar(FILE_TOPIC), n),
        pa.repeat(pa.scalar(0, pa.int32()), n),
        pa.array(range(first, first + n), pa.int64()),
        pa.repeat(pa.scalar(0, pa.timestamp("us", tz="UTC")), n),
    ], schema=ARROW_SCHEMA)


class JsonlFileSource(DataSource):
    """Options: `path` (the JSONL file), `lines_per_partition` (default 200000)."""

    @classmethod
    def name(cls) -> str:
        return "fleetwatch_jsonl"

    def schema(self) -> StructType:
        return SCHEMA

    def streamReader(self, schema) -> DataSourceStreamReader:
        path = self.options.get("path")
        if not path or not Path(path).is_file():
            raise ValueError(f"fleetwatch_jsonl: no such file: {path!r}")
        return JsonlStreamReader(str(Path(path).resolve()), int(self.options.get("lines_per_partition", 200000)))
