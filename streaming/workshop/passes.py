"""The job's two passes run without Spark, over a bus held in memory and read in micro-batches planned
as the Python reader plans them: the parse stage's rows of each batch to the first pass's buckets
(streaming/pipeline/state.py), their rows to the second pass (streaming/detect/second_pass.py), as the
job's driver runs it. Spark's state store is a dict per bucket (what the tests and bench/python_stages.py
that run it are not about); everything else is the job's own code.

`Bus` holds the records of each topic-partition as a producer keyed by cluster id writes them;
`InMemoryJob.read(bus, cap)` plans the batches that read everything it holds, as
`KafkaStreamReader.latestOffset` does (`allocate`), and runs each; `lines` are the alert lines.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from kafka.partitioner.default import murmur2

from streaming.config import RuleBook
from streaming.detect import SecondPass
from streaming.pipeline import DetectorProcessor, ParseSettings, parse_chunk
from streaming.records import topics
from streaming.records.alert import decode_output
from streaming.records.job_output import Kind
from streaming.source import allocate

__all__ = ["Bus", "InMemoryJob"]


class _State:
    def __init__(self) -> None:
        self.value: Any = None

    def get(self) -> Any:
        return self.value

    def update(self, value: Any) -> None:
        self.value = value

    def clear(self) -> None:
        self.value = None


class _Handle:
    """The part of Spark's StatefulProcessorHandle the processors use."""

    def __init__(self) -> None:
        self.states: dict[str, _State] = {}
        self.key: Any = None

    def getValueState(self, name: str, schema: Any) -> Any:
        handle = self

        class _Keyed:  # one value per grouping key, as Spark keeps it
            def get(self) -> Any:
                return handle.states.setdefault(f"{name}/{handle.key}", _State()).get()

            def update(self, value: Any) -> None:
                handle.states.setdefault(f"{name}/{handle.key}", _State()).update(value)

            def clear(self) -> None:
                handle.states.pop(f"{name}/{handle.key}", None)

        return _Keyed()

    def registerTimer(self, ms: int) -> None:
        raise AssertionError("detection keeps its own watermark: no Spark timer")

    def deleteTimer(self, ms: int) -> None:
        pass


@dataclass
class _TimerValues:
    watermark: int

    def getCurrentWatermarkInMs(self) -> int:
        return self.watermark


@dataclass
class Bus:
    """Records per "topic:partition", in the order a producer keyed by cluster id wrote them."""

    partitions: dict[str, int] = field(default_factory=lambda: {topics.HEARTBEATS: 2, topics.METADATA: 2,
                                                                  topics.BROKER_STATES: 1})
    records: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    def produce(self, items: Iterable[tuple[str, dict[str, Any]]]) -> None:
        for topic, event in items:
            self.append(topic, event, json.dumps(event))

    def append(self, topic: str, event: dict[str, Any], text: str) -> None:
        """`event`, as its producer wrote it (`text`), to its cluster's partition of `topic`."""
        key = (event.get("cluster_id") or "").encode()
        partition = (murmur2(key) & 0x7FFFFFFF) % self.partitions[topic]
        self.records[f"{topic}:{partition}"].append(text)


class InMemoryJob:
    """The two passes of the job over `Bus` records, reading from where the last `read` stopped."""

    def __init__(self, book: RuleBook | None = None, buckets: int = 4) -> None:
        self.book = book or RuleBook()
        self.buckets = buckets
        self.settings = ParseSettings.of(self.book, buckets)
        self.read_to: dict[str, int] = {}
        self.spark_watermark = 0
        self.output: list[tuple[Any, ...]] = []
        self.first_pass_rows: list[list[tuple[Any, ...]]] = []  # each batch's, as the driver receives them
        self.batches = 0
        self._first = _Handle()
        self._second = SecondPass(self.book)

    def read(self, bus: Bus, cap: int | None, planned_ms: int) -> None:
        """Everything the bus holds, in micro-batches planned under `cap` (None: one batch)."""
        while True:
            lags = {source: len(records) - self.read_to.get(source, 0) for source, records in bus.records.items()}
            if not any(lags.values()):
                return
            take = lags if cap is None else allocate(cap, lags)
            ranges = {source: (self.read_to.get(source, 0), self.read_to.get(source, 0) + n)
                      for source, n in take.items() if n}
            self._batch(bus, ranges, cap, planned_ms)
            for source, (_, end) in ranges.items():
                self.read_to[source] = end

    def _batch(self, bus: Bus, ranges: dict[str, tuple[int, int]], cap: int | None, planned_ms: int) -> None:
        cache: dict[str, int] = {}
        parsed = []
        for source, (start, end) in sorted(ranges.items()):  # one chunk per range, as one task reads it
            topic, partition = source.rsplit(":", 1)
            n = end - start
            parsed.append(parse_chunk(self.settings, cache, planned_ms, [topic] * n, [int(partition)] * n,
                                      list(range(start, end)), bus.records[source][start:end]))
        frame = pd.concat([batch.to_pandas() for batch in parsed], ignore_index=True)
        timer_values = _TimerValues(self.spark_watermark)
        first = DetectorProcessor(self.book, self.buckets, cap)
        first.init(self._first)
        rows: list[tuple[Any, ...]] = []
        for bucket, chunk in frame.groupby("bucket"):
            self._first.key = bucket
            for out in first.handleInputRows((int(bucket),), iter([chunk]), timer_values):
                rows += out.itertuples(index=False, name=None)
        self.first_pass_rows.append(rows)
        self.output += self._second.run(self.batches, rows)[0]
        valid = frame["ts"].dropna()
        if len(valid):  # Spark's watermark for the next batch: the largest event time so far, less lateness
            self.spark_watermark = max(self.spark_watermark,
                                       int(valid.max()) - self.book.defaults.allowed_lateness_ms)
        self.batches += 1

    def lines(self) -> set[tuple[str, str]]:
        """(alert_id, status) of every alert line."""
        return {(alert.alert_id, alert.status) for alert in self._alerts()}

    def described(self, lines: set[tuple[str, str]]) -> list[tuple]:
        return sorted((a.status, a.rule, a.cluster_id, a.broker_id, a.starts_at, a.ends_at)
                      for a in self._alerts() if (a.alert_id, a.status) in lines)

    def late(self) -> int:
        return sum(1 for row in self.output if row[0] == Kind.LATE)

    def _alerts(self) -> Iterator[Any]:
        return (decode_output(row[3])[1] for row in self.output if row[0] == Kind.ALERT)
