"""The offsets of the `fleetwatch_kafka` source and the arithmetic of planning a micro-batch on them.

An offset is a JSON object `{"<topic>:<partition>": <next offset>, ..., "topic_ids": {"<topic>":
<topic id>}, "gone_topics": ["<topic>", ...]}` (string keys, because Spark round-trips it through
JSON in the checkpoint); the ids tell a topic that was deleted and created again (or lost by an
in-memory bus) from the one read so far. `gone_topics` (only when not empty) names the topics read
before that the bus no longer holds: their partitions keep their offsets (a topic that comes back
under its old id goes on from there), and the batch that meets the deletion differs from the one
before, so the job's progress listener sees it and names the topic (streaming/source/bus_loss.py). The
reader that parses as it reads adds `"planned_ms"`, when the batch ending there was planned
(streaming/pipeline/parsing_reader.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from kafka import TopicPartition

from streaming.source.bus_loss import GONE_TOPICS, NOT_PARTITIONS, TOPIC_IDS

__all__ = [
    "GONE_TOPICS",
    "TOPIC_IDS",
    "Offsets",
    "allocate",
    "offsets_by_partition",
    "partition_key",
    "restarted_topics",
    "topic_partition",
]

Offsets = dict[str, Any]


def partition_key(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"


def topic_partition(key: str) -> TopicPartition:
    # Kafka topic names cannot contain ':', so the last one separates the partition.
    topic, partition = key.rsplit(":", 1)
    return TopicPartition(topic, int(partition))


def offsets_by_partition(offsets: Offsets) -> dict[str, int]:
    """The topic-partitions' offsets, without the topic ids, the gone topics and the planning time."""
    return {key: offset for key, offset in offsets.items() if key not in NOT_PARTITIONS}


def restarted_topics(start: Offsets, end: Offsets) -> set[str]:
    """The topics whose partitions restarted between two offsets: the topic id changed, or one of
    its partitions went back (a recreated topic, an in-memory bus restarted). A topic restarts as
    a whole: all its partitions are read from their beginning."""
    before, after = start.get(TOPIC_IDS, {}), end.get(TOPIC_IDS, {})
    restarted = {topic for topic, topic_id in after.items() if before.get(topic) not in (None, topic_id)}
    begin = offsets_by_partition(start)
    return restarted | {topic_partition(key).topic for key, offset in offsets_by_partition(end).items()
                        if offset < begin.get(key, 0)}


def allocate(cap: int, lags: Mapping[str, int]) -> dict[str, int]:
    """Split `cap` rows over partitions in proportion to their lag, as Spark's kafka connector
    splits `maxOffsetsPerTrigger` (`KafkaMicroBatchStream.rateLimit`): a share below one record is
    rounded up (every partition with unread records gets at least one), any other down; never
    above a lag. The sum may miss the cap by less than one record per partition either way.

    Both sources planning alike is what detection's clock relies on to tell a capped micro-batch
    and to know that a partition absent from one had nothing left to read
    (streaming/detect/bus_clock.py)."""
    total = sum(lags.values())
    if total <= cap:
        return dict(lags)
    share = {}
    for key, lag in lags.items():
        if lag > 0:
            prorate = cap * lag / total
            share[key] = min(lag, math.ceil(prorate) if prorate < 1 else math.floor(prorate))
        else:
            share[key] = 0
    return share
