"""How the Python reader's planner turns a micro-batch's offset ranges into Spark tasks."""

from __future__ import annotations

import pytest

from streaming.source import TopicPartitionRange
from streaming.source.kafka_ranges import plan_tasks, ranges_of


def _ranges(*sizes: int) -> list[TopicPartitionRange]:
    return [TopicPartitionRange("t", partition, 100, 100 + size) for partition, size in enumerate(sizes)]


@pytest.mark.parametrize(("sizes", "max_tasks", "min_task_records", "task_sizes"), [
    ((5, 3, 4), None, 0, [3, 4, 5]),  # no limit: a task per range
    ((5, 3, 4), 2, 0, [5, 7]),
    ((5, 3, 4), None, 1_000, [12]),  # a small batch: one task, whatever the ranges
    ((5, 3, 4), 8, 1_000, [12]),
    ((3_000, 2_500, 1_500, 900), 4, 1_000, [900, 1_500, 2_500, 3_000]),  # 7,900 records: 7 allowed, 4 ranges
    ((3_000, 2_500, 1_500, 900), 2, 1_000, [3_900, 4_000]),  # the lower limit
    ((1_200, 700, 600), 4, 1_000, [1_200, 1_300]),  # 2,500 records: two tasks
    ((999,), 4, 1_000, [999]),  # fewer records than a task's share: still one task
])
def test_a_batch_is_read_by_as_many_tasks_as_both_limits_allow(
        sizes: tuple[int, ...], max_tasks: int | None, min_task_records: int, task_sizes: list[int]) -> None:
    ranges = _ranges(*sizes)
    tasks = plan_tasks(ranges, max_tasks, min_task_records)
    assert sorted(sum(r.end - r.start for r in ranges_of(task)) for task in tasks) == task_sizes
    read = sorted((r.partition, r.start, r.end) for task in tasks for r in ranges_of(task))
    assert read == sorted((r.partition, r.start, r.end) for r in ranges)


def test_a_batch_without_ranges_has_no_task() -> None:
    assert plan_tasks([], 4, 1_000) == []
