"""The partition layout (issue 30): where a cluster's partitions live and each topic's
`min.insync.replicas`, read on its own slower cadence and published as a `partition_layout` event.

One connection to the address whose bootstrap answered this round:
- DescribeTopicPartitions v0 (Kafka 3.8+, KIP-966) with an empty topic list (every topic), page
  after page along its cursor (`NextCursor`), `ResponsePartitionLimit` partitions per page; without
  it, one Metadata v1+ with a null topic list (every topic, in one answer);
- DescribeConfigs for `min.insync.replicas` of the topics read (their effective value, the brokers'
  default included), in batches, and of the answering broker (the default, for a topic whose own
  value was not read).
Bounded per cluster (`probe.layout_*` of the config): the reading stops at `max_bytes` of answers or
at its deadline, whichever comes first; what it read by then is published with `complete` false
(the rules then fire on what it shows and resolve nothing: streaming/detect/partitions.py). One
answer may be as big as the reading's own byte bound, or the probe's `max_response_bytes` where that
is bigger (`layout_frame_limit`): a Metadata answer lists every partition at once (~27 bytes each,
bench/layout_cost.py), so the probe's 1 MiB would refuse a cluster of ~40,000 on a broker older
than 3.8 that DescribeTopicPartitions would page through.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from streaming.collect.probe.targets import LayoutLimits, ProbeOptions, Target
from streaming.collect.protocol.client import Connection, ProbeFailure
from streaming.records.contract import (
    MAX_LAYOUT_PARTITIONS,
    MAX_NAME_CHARS,
    PartitionLayout,
    TopicLayout,
    event_to_dict,
)

__all__ = ["LayoutReading", "layout_event", "layout_frame_limit", "read_layout"]

METADATA = 3
DESCRIBE_CONFIGS = 32
DESCRIBE_TOPIC_PARTITIONS = 75
MIN_ISR = "min.insync.replicas"
_TOPIC, _BROKER = 2, 4  # DescribeConfigs resource types


@dataclass
class LayoutReading:
    """What one reading got: the topics in the order read, and what it cost."""

    topics: dict[str, dict[int, tuple[int, tuple[int, ...], tuple[int, ...]]]] = field(default_factory=dict)
    min_isr: dict[str, int] = field(default_factory=dict)
    default_min_isr: int | None = None
    complete: bool = True
    api: str = ""  # DescribeTopicPartitions or Metadata
    requests: int = 0
    bytes_read: int = 0
    ms: int = 0


def layout_frame_limit(options: ProbeOptions) -> int:
    """The biggest answer a layout reading takes (see the module's docstring)."""
    return max(options.max_response_bytes, options.layout.max_bytes)


async def read_layout(target: Target, host: str, port: int, limits: LayoutLimits, *, client_id: str,
                      broker_id: int | None, connection: type[Connection] = Connection,
                      max_frame: int, decode_slot: asyncio.Semaphore | None = None,
                      lookup_slot: asyncio.Semaphore | None = None,
                      lookup_pool: Executor | None = None) -> LayoutReading:
    """One reading over one connection (module docstring); raises ProbeFailure when nothing was read.
    The slots and the pool are the target's share of threads (streaming/collect/protocol/client.py)."""
    loop = asyncio.get_running_loop()
    begun = loop.time()
    reading = LayoutReading()
    conn = connection(host, port, deadline=begun + limits.timeout_ms / 1000, client_id=client_id,
                      security=target.security, max_frame=max_frame, decode_slot=decode_slot,
                      lookup_slot=lookup_slot, lookup_pool=lookup_pool)
    try:
        await conn.open()
        await conn.negotiate()
        if target.security.sasl:
            await conn.authenticate()
        try:
            if conn.supported(DESCRIBE_TOPIC_PARTITIONS, 0, 0) is not None:
                await _pages(conn, reading, limits)
            else:
                await _metadata(conn, reading)
            await _configs(conn, reading, limits, broker_id)
        except (ProbeFailure, TimeoutError):
            if not reading.topics:
                raise
            reading.complete = False  # out of time (or refused midway): what was read stands
    finally:
        reading.bytes_read = conn.bytes_read
        reading.ms = int((loop.time() - begun) * 1000)
        conn.close()
    return reading


def _over(conn: Connection, reading: LayoutReading, limits: LayoutLimits) -> bool:
    count = sum(len(p) for p in reading.topics.values())
    return conn.bytes_read >= limits.max_bytes or count >= MAX_LAYOUT_PARTITIONS


async def _pages(conn: Connection, reading: LayoutReading, limits: LayoutLimits) -> None:
    reading.api = "DescribeTopicPartitions"
    cursor: dict[str, Any] | None = None
    while True:
        body = await conn.call("DescribeTopicPartitions", 0, {
            "Topics": [], "ResponsePartitionLimit": limits.page_partitions, "Cursor": cursor})
        reading.requests += 1
        for topic in body["Topics"]:
            _take(reading, topic)
        cursor = body["NextCursor"]
        if cursor is None:
            return
        if _over(conn, reading, limits):
            reading.complete = False
            return


async def _metadata(conn: Connection, reading: LayoutReading) -> None:
    version = conn.supported(METADATA, 1, 12)
    if version is None:
        raise ProbeFailure("UNSUPPORTED_VERSION", "no Metadata version in common (need v1+)")
    reading.api = "Metadata"
    body = await conn.call("Metadata", version, {
        "Topics": None, "AllowAutoTopicCreation": False,
        "IncludeClusterAuthorizedOperations": False, "IncludeTopicAuthorizedOperations": False})
    reading.requests += 1
    for topic in body["Topics"]:
        _take(reading, topic)


def _take(reading: LayoutReading, topic: dict[str, Any]) -> None:
    name = topic["Name"]
    if topic["ErrorCode"] or not name or len(name) > MAX_NAME_CHARS:
        return  # not authorised, being deleted: a topic the reading cannot speak for
    partitions = reading.topics.setdefault(name, {})
    for p in topic["Partitions"]:
        partitions[p["PartitionIndex"]] = (p["LeaderId"], tuple(p["ReplicaNodes"]), tuple(p["IsrNodes"]))


async def _configs(conn: Connection, reading: LayoutReading, limits: LayoutLimits, broker_id: int | None) -> None:
    version = conn.supported(DESCRIBE_CONFIGS, 1, 4)
    if version is None:
        return
    resources = [(_TOPIC, name) for name in reading.topics]
    if broker_id is not None:
        resources.append((_BROKER, str(broker_id)))  # a broker describes its own configs only
    for start in range(0, len(resources), limits.configs_per_request):
        if conn.bytes_read >= limits.max_bytes:
            reading.complete = False
            return
        body = await conn.call("DescribeConfigs", version, {
            "Resources": [{"ResourceType": kind, "ResourceName": name, "ConfigurationKeys": [MIN_ISR]}
                          for kind, name in resources[start:start + limits.configs_per_request]],
            "IncludeSynonyms": False, "IncludeDocumentation": False})
        reading.requests += 1
        for result in body["Results"]:
            value = next((c["Value"] for c in result["Configs"] if c["Name"] == MIN_ISR), None)
            if result["ErrorCode"] or value is None or not value.isdigit():
                continue
            if result["ResourceType"] == _BROKER:
                reading.default_min_isr = int(value)
            else:
                reading.min_isr[result["ResourceName"]] = int(value)


def layout_event(reading: LayoutReading, cluster_id: str, target: str, ts: int, source: str) -> dict[str, Any]:
    """The `partition_layout` event of a reading, in its wire form."""
    return event_to_dict(PartitionLayout(
        ts=ts, source=source, cluster_id=cluster_id, target=target, complete=reading.complete,
        default_min_insync=reading.default_min_isr,
        topics=tuple(TopicLayout(name, reading.min_isr.get(name),
                                 tuple((index, *where) for index, where in sorted(parts.items())))
                     for name, parts in reading.topics.items())))

