"""Records the bus dropped before the job read them, told from a micro-batch's progress.

Both telemetry sources (Spark's kafka connector with `failOnDataLoss=false`, and the Python reader)
skip what the bus no longer holds and carry on: retention or DeleteRecords moved a partition's
start past the offset the job was at, or its topic was deleted (and perhaps created again). What
was skipped shows in the progress of the batch that met it: the source's offsets say how many
records the batch planned to read, `messages_read` how many it read. The difference is what the
bus lost. Offsets count records one by one on the telemetry topics (no transactions, no
compaction: collectors send plain records), so nothing else makes them differ.

The two offset formats:
- Spark's connector: `{"<topic>": {"<partition>": <offset>}}`;
- the Python reader (`streaming.source`): `{"<topic>:<partition>": <offset>, "topic_ids": {...},
  "gone_topics": [...]}`.
A partition that went back, or whose topic got another id, was read from its beginning (0) by
both sources: it planned `end` records. A partition new in a batch is read from 0 as well.

A topic deleted under the running job shows the same way: Spark's connector (subscribed by pattern)
drops the topic's partitions from the batch's end offsets, the Python reader names it in
`gone_topics` (it keeps the partitions' offsets); when the topic exists again it is back in the end
offsets, or out of `gone_topics`. `topics_changed` tells both.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["GONE_TOPICS", "MESSAGES_READ", "NOT_PARTITIONS", "PLANNED_MS", "TOPIC_IDS", "messages_read",
           "planned_records", "records_lost", "topics_changed"]

# The Python reader's keys beside its topic-partitions' (which always hold a ':'); the reader
# (streaming/source/kafka_offsets.py) writes them with these names. `planned_ms`: when the driver
# planned the batch that ends at these offsets (the reader that parses, streaming/pipeline/parsing_reader.py).
TOPIC_IDS = "topic_ids"
GONE_TOPICS = "gone_topics"
PLANNED_MS = "planned_ms"
NOT_PARTITIONS = (TOPIC_IDS, GONE_TOPICS, PLANNED_MS)
# The observed metric (Spark's `observe`) in which the job's graph counts the messages its source
# read, as its column `messages`: the reader that parses as it reads hands Spark one row per state
# bucket and chunk, so `numInputRows` counts those rows, not messages.
MESSAGES_READ = "messages_read"


def messages_read(progress: dict[str, Any]) -> int:
    """The telemetry messages a micro-batch read (its progress, as Spark's JSON has it): the graph's
    count where it is there, else Spark's `numInputRows` (a query whose graph does not count them
    reads raw rows, one per message)."""
    observed = ((progress.get("observedMetrics") or {}).get(MESSAGES_READ) or {}).get("messages")
    return int(observed) if observed is not None else int(progress.get("numInputRows", 0))


def _by_partition(offsets: dict[str, Any]) -> tuple[dict[str, int], dict[str, str]]:
    """Offsets by "topic:partition", and the topic ids (Python reader only)."""
    flat: dict[str, int] = {}
    for key, value in offsets.items():
        if key in NOT_PARTITIONS:
            continue
        if isinstance(value, dict):  # Spark's connector: per topic, per partition
            flat.update({f"{key}:{partition}": int(offset) for partition, offset in value.items()})
        else:
            flat[key] = int(value)
    return flat, dict(offsets.get(TOPIC_IDS) or {})


def _parsed(offsets: Any) -> dict[str, Any] | None:
    if offsets is None:
        return None
    if isinstance(offsets, str):
        try:
            offsets = json.loads(offsets)
        except ValueError:
            return None  # not a Kafka source's offsets (the progress listener must not fail on it)
    return offsets if isinstance(offsets, dict) else None


def planned_records(start: Any, end: Any) -> int | None:
    """How many records a batch planned to read between two offsets of a Kafka source (JSON text
    or parsed), or None when they are not a Kafka source's (or the batch is a query's first)."""
    begin, until = _parsed(start), _parsed(end)
    if begin is None or until is None:
        return None
    begin_at, begin_ids = _by_partition(begin)
    until_at, until_ids = _by_partition(until)
    total = 0
    for key, stop in until_at.items():
        topic = key.rsplit(":", 1)[0]
        restarted = begin_ids.get(topic) not in (None, until_ids.get(topic)) or stop < begin_at.get(key, 0)
        total += stop if restarted else stop - begin_at.get(key, 0)
    return total


def records_lost(start: Any, end: Any, read: int) -> int:
    """Records a batch planned and did not read: the bus no longer held them."""
    planned = planned_records(start, end)
    return 0 if planned is None else max(0, planned - read)


def _topics(offsets: dict[str, Any]) -> set[str]:
    """The topics a source's offsets say it reads: those with partitions, but the gone ones."""
    return {key.rsplit(":", 1)[0] for key in _by_partition(offsets)[0]} - set(offsets.get(GONE_TOPICS) or ())


def topics_changed(start: Any, end: Any) -> tuple[list[str], list[str]]:
    """The topics a batch lost (deleted from the bus) and those it gained (back, or new), between
    two offsets of a Kafka source; nothing when they are not a Kafka source's (or the first batch)."""
    begin, until = _parsed(start), _parsed(end)
    if begin is None or until is None:
        return [], []
    before, after = _topics(begin), _topics(until)
    return sorted(before - after), sorted(after - before)
