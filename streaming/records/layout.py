"""The `partition_layout` event (issue 30; streaming/detect/README.md, "Contract additions"): where a
cluster's partitions live and each topic's `min.insync.replicas`, one reading of a collector."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from streaming.records.contract_checks import INT32, Rejected, check_field, check_int, check_str

__all__ = ["MAX_LAYOUT_PARTITIONS", "Partition", "PartitionLayout", "TopicLayout", "layout_from_dict",
           "layout_to_dict"]

_MAX_NAME_CHARS = 255  # contract._MAX_NAME_CHARS: a topic name is a name like the others

# A partition_layout lists every partition of its cluster in one message: beyond this many it is
# refused (`too_long:topics`), so one event can neither blow the state nor a micro-batch. The probe
# sends a partial layout (`complete` false) rather than a longer one.
MAX_LAYOUT_PARTITIONS = 200_000
# One partition of a layout: (index, leader id or -1, replica ids, in-sync replica ids).
Partition = tuple[int, int, tuple[int, ...], tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class TopicLayout:
    name: str
    min_insync: int | None  # the topic's effective min.insync.replicas; None: not read
    partitions: tuple[Partition, ...]


@dataclass(frozen=True, slots=True)
class PartitionLayout:
    """Where a cluster's partitions live (issue 30): one reading of a collector, on its slower cadence."""

    ts: int
    source: str
    cluster_id: str  # never null or empty: see missing_cluster_id
    target: str
    complete: bool  # false: the collector stopped at its byte or time bound; what is listed stands
    default_min_insync: int | None  # the brokers' min.insync.replicas, for a topic without its own
    topics: tuple[TopicLayout, ...]
    type: Literal["partition_layout"] = "partition_layout"


def _ids(raw: Any, path: str) -> tuple[int, ...]:
    if raw.__class__ is not list:
        raise Rejected(f"wrong_type:{path}", type(raw).__name__)
    for value in raw:
        if value.__class__ is not int or not INT32[0] <= value <= INT32[1]:
            raise Rejected(f"wrong_type:{path}" if value.__class__ is not int else f"out_of_range:{path}",
                           repr(value)[:40])
    return tuple(raw)


def _topic_layouts(raw: list[Any]) -> tuple[TopicLayout, ...]:
    """`topics` of a partition_layout: [{"name", "min_insync", "partitions": [[index, leader,
    [replicas], [isr]], ...]}]. The field paths of a reason name the topic's place, never its
    partition's (a bounded cardinality of reasons)."""
    out, count = [], 0
    for i, item in enumerate(raw):
        where = f"topics[{i}]."
        if item.__class__ is not dict:
            raise Rejected(f"wrong_type:topics[{i}]", type(item).__name__)
        partitions = check_field(item, "partitions", list, where=where)
        count += len(partitions)
        if count > MAX_LAYOUT_PARTITIONS:
            raise Rejected("too_long:topics", f"more than {MAX_LAYOUT_PARTITIONS} partitions")
        parsed = []
        for entry in partitions:
            if entry.__class__ is not list or len(entry) != 4:
                raise Rejected(f"wrong_type:{where}partitions", "each is [index, leader, [replicas], [isr]]")
            index, leader, replicas, isr = entry
            (index, leader) = _ids([index, leader], f"{where}partitions")
            parsed.append((index, leader, _ids(replicas, f"{where}partitions"), _ids(isr, f"{where}partitions")))
        out.append(TopicLayout(name=check_str(item, "name", _MAX_NAME_CHARS, where=where),
                               min_insync=check_int(item, "min_insync", INT32, required=False, where=where),
                               partitions=tuple(parsed)))
    return tuple(out)




def layout_from_dict(obj: dict[str, Any], ts: int, source: str, cluster_id: str) -> PartitionLayout:
    """The rest of a partition_layout, its common fields checked by contract.event_from_dict."""
    return PartitionLayout(
        ts=ts, source=source, cluster_id=cluster_id, target=check_str(obj, "target", _MAX_NAME_CHARS),
        complete=check_field(obj, "complete", bool, required=False) is not False,
        default_min_insync=check_int(obj, "default_min_insync", INT32, required=False),
        topics=_topic_layouts(check_field(obj, "topics", list)))


def layout_to_dict(event: PartitionLayout) -> dict[str, Any]:
    return {"schema": "fleetwatch.event/v1", "type": event.type, "ts": event.ts, "source": event.source,
            "cluster_id": event.cluster_id, "target": event.target, "complete": event.complete,
            "default_min_insync": event.default_min_insync,
            "topics": [{"name": t.name, "min_insync": t.min_insync,
                        "partitions": [[p[0], p[1], list(p[2]), list(p[3])] for p in t.partitions]}
                       for t in event.topics]}
