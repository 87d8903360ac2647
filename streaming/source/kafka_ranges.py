"""The input partitions of the `fleetwatch_kafka` source: the ranges of offsets one Spark task reads."""

from __future__ import annotations

from pyspark.sql.datasource import InputPartition

__all__ = ["RangeGroup", "TopicPartitionRange", "group_ranges", "plan_tasks", "ranges_of"]


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


def ranges_of(task: InputPartition) -> list[TopicPartitionRange]:
    """The ranges one task reads: a range's own, or each of a group's."""
    if isinstance(task, RangeGroup):
        return task.ranges
    assert isinstance(task, TopicPartitionRange)
    return [task]


def plan_tasks(ranges: list[TopicPartitionRange], max_tasks: int | None,
               min_task_records: int) -> list[TopicPartitionRange] | list[RangeGroup]:
    """The Spark tasks that read a micro-batch's `ranges`: one per range, or the ranges grouped
    (`group_ranges`) into at most `max_tasks` (None: no such limit) and at most one task per
    `min_task_records` records of the batch (0: no such limit), never fewer than one."""
    tasks = len(ranges)
    if max_tasks is not None:
        tasks = min(tasks, max_tasks)
    if min_task_records:
        tasks = min(tasks, max(1, sum(r.end - r.start for r in ranges) // min_task_records))
    return group_ranges(ranges, tasks) if tasks < len(ranges) else ranges


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
