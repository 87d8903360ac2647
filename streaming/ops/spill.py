"""Events sorted by event time without holding them all: `fleetwatch export`'s range can be hours of
a fleet's telemetry (a 1,000-cluster fleet publishes ~9,000 events a second), more than memory.

`SortedSpill` keeps up to `buffer_events` in memory; a full buffer is sorted and written to a run
file of its own (length-prefixed records, so a value may hold any byte); `drain()` merges the runs
and the buffer (heapq.merge: one record of each run in memory at a time) in key order.
"""

from __future__ import annotations

import heapq
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = ["Keyed", "SortedSpill"]

# (ts, topic's rank, partition, offset): the file's order; then the record's value.
Keyed = tuple[int, int, int, int, bytes]
_HEAD = struct.Struct(">qiiqI")


class SortedSpill:
    def __init__(self, buffer_events: int = 500_000, workdir: Path | None = None) -> None:
        if buffer_events < 1:
            raise ValueError("buffer_events must be at least 1")
        self.buffer_events = buffer_events
        self._buffer: list[Keyed] = []
        self._dir = tempfile.TemporaryDirectory(prefix="fleetwatch-export-", dir=workdir)
        self._runs: list[Path] = []
        self.count = 0

    @property
    def runs(self) -> int:
        """How many sorted runs went to disk so far."""
        return len(self._runs)

    def add(self, item: Keyed) -> None:
        self._buffer.append(item)
        self.count += 1
        if len(self._buffer) >= self.buffer_events:
            self._spill()

    def _spill(self) -> None:
        self._buffer.sort(key=_key)
        path = Path(self._dir.name) / f"run-{len(self._runs)}"
        with path.open("wb") as fh:
            for ts, rank, partition, offset, value in self._buffer:
                fh.write(_HEAD.pack(ts, rank, partition, offset, len(value)))
                fh.write(value)
        self._runs.append(path)
        self._buffer = []

    def drain(self) -> Iterator[Keyed]:
        """Every item added, in key order; then the run files are gone."""
        self._buffer.sort(key=_key)
        files = [path.open("rb") for path in self._runs]
        try:
            yield from heapq.merge(*(_read_run(fh) for fh in files), self._buffer, key=_key)
        finally:
            for fh in files:
                fh.close()
            self._buffer = []
            self._dir.cleanup()


def _key(item: Keyed) -> tuple[int, int, int, int]:
    return item[0], item[1], item[2], item[3]


def _read_run(fh: BinaryIO) -> Iterator[Keyed]:
    while head := fh.read(_HEAD.size):
        ts, rank, partition, offset, size = _HEAD.unpack(head)
        yield ts, rank, partition, offset, fh.read(size)
