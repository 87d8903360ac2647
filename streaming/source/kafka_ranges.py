"""The input partitions of the `fleetwatch_kafka` source: the ranges of offsets one Spark task reads."""

from __future__ import annotations

from pyspark.sql.datasource import InputPartition

__all__ = ["RangeGroup", "TopicPartitionRange", "group_ranges"]


class TopicPartitionRange(InputPartition):
    """Offsets [start, end) of one topic-partition: the unit of work of one Spark task."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        self.topic, self.partition, self.start, self.end = topic, partition, start, end

    def __repr__(self) -> str:
        return f"TopicPartitionRange({self.topic}:{self.partition} [{self.start}, {self.end}))"


class RangeGroup(InputPartition):
    """Several topic-partition ranges read one after the other by one Spark task."""

    def __init__(self, ranges: list[TopicPartitionRange]) -> None:
        self.ranges = ranges

    def __repr__(self) -> str:
        return f"RangeGroup({self.ranges!r})"


def group_ranges(ranges: list[TopicPartitionRange], groups: int) -> list[RangeGroup]:
    """Ranges into at most `groups` groups of about equal size: the largest range first, each
    into the group with the fewest records so far."""
    bins: list[list[TopicPartitionRange]] = [[] for _ in range(min(groups, len(ranges)))]
    sizes = [0] * len(bins)
    for r in sorted(ranges, key=lambda r: (-(r.end - r.start), r.topic, r.partition)):
        smallest = sizes.index(min(sizes))
        bins[smallest].append(r)
        sizes[smallest] += r.end - r.start
    return [RangeGroup(b) for b in bins]
