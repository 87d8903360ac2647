"""The probe's partition layout (issue 30; streaming/collect/probe/layout.py) against a fake Kafka 4.4
that answers DescribeTopicPartitions along its cursor, Metadata with every topic and DescribeConfigs,
through the probe's own codec and connections. (The numbers against real Kafka: the blast-radius test
of tests/pipeline/test_real_kafka_faults.py, and bench/layout_cost.py.)"""

from __future__ import annotations

import asyncio
from typing import Any

from support.probe_doubles import HOST, FakeCluster, FakeKafka, target, valid

from streaming.collect.probe import LayoutLimits, ProbeOptions, Prober, read_layout

T0 = 1_764_000_000_000
# Three topics of 5, 2 and 3 partitions on brokers 1-3; p1 of orders is offline, p0 of audit has one in sync.
PARTITIONS = {
    "orders": [(p, 1 + p % 3 if p != 1 else -1, [1, 2, 3], [1, 2, 3] if p != 1 else [2]) for p in range(5)],
    "audit": [(0, 2, [2, 3], [2]), (1, 3, [3, 1], [3, 1])],
    "logs": [(p, 3, [3], [3]) for p in range(3)],
}


def _cluster() -> FakeCluster:
    cluster = FakeCluster("layout-cluster")
    cluster.partitions = {name: list(parts) for name, parts in PARTITIONS.items()}
    cluster.min_isr, cluster.default_min_isr = {"orders": 2}, 1
    return cluster


def _read(limits: LayoutLimits, *, pages: bool = True) -> tuple[Any, FakeKafka]:
    async def scenario() -> tuple[Any, FakeKafka]:
        cluster = _cluster()
        broker = await FakeKafka(cluster, 1, pages=pages).start()
        cluster.brokers = [{"node_id": 1, "port": broker.port, "fenced": False}]
        try:
            reading = await read_layout(target("t", f"{HOST}:{broker.port}"), HOST, broker.port, limits,
                                        client_id="test", broker_id=1, max_frame=1 << 20)
            return reading, broker
        finally:
            await broker.stop()

    return asyncio.run(scenario())


def _as_read(name: str) -> dict[int, tuple[int, tuple[int, ...], tuple[int, ...]]]:
    return {p: (leader, tuple(replicas), tuple(isr)) for p, leader, replicas, isr in PARTITIONS[name]}


def test_pages_along_the_cursor_until_every_partition_is_read_then_the_minimums():
    reading, broker = _read(LayoutLimits(page_partitions=4))
    assert reading.complete and reading.api == "DescribeTopicPartitions"
    assert reading.topics == {name: _as_read(name) for name in PARTITIONS}
    # 10 partitions in pages of 4: three pages, the second one starting within a topic; then one
    # DescribeConfigs for the three topics and the answering broker's default.
    pages = [body for api, _, body in broker.requests if api == "DescribeTopicPartitions"]
    assert [p["Cursor"] for p in pages] == [None, {"TopicName": "logs", "PartitionIndex": 2},
                                            {"TopicName": "orders", "PartitionIndex": 3}]
    assert reading.requests == 4
    assert (reading.min_isr, reading.default_min_isr) == ({"orders": 2, "audit": 1, "logs": 1}, 1)
    assert reading.bytes_read > 0


def test_the_byte_bound_stops_the_reading_and_says_it_is_partial():
    reading, _ = _read(LayoutLimits(page_partitions=4, max_bytes=1))
    assert not reading.complete
    assert sum(len(p) for p in reading.topics.values()) == 4  # the first page stands
    assert reading.min_isr == {}  # no DescribeConfigs past the bound


def test_without_describe_topic_partitions_one_metadata_answer_lists_every_topic():
    paged, _ = _read(LayoutLimits())
    fallback, broker = _read(LayoutLimits(), pages=False)
    assert fallback.api == "Metadata" and fallback.complete
    assert fallback.topics == paged.topics
    assert [body["Topics"] for api, _, body in broker.requests if api == "Metadata"] == [None]


def test_the_prober_reads_the_layout_on_its_own_cadence_and_publishes_a_valid_event():
    async def scenario() -> list[list[dict[str, Any]]]:
        cluster = _cluster()
        broker = await FakeKafka(cluster, 1).start()
        cluster.brokers = [{"node_id": 1, "port": broker.port, "fenced": False}]
        options = ProbeOptions(interval_ms=5000, timeout_ms=2000, source="probe-t",
                               layout=LayoutLimits(interval_ms=12_000))
        prober = Prober([target("pay", f"{HOST}:{broker.port}")], options)
        try:
            return [await prober.probe_round_async(T0 + s * 1000) for s in (0, 5, 10, 15)]
        finally:
            await broker.stop()

    rounds = asyncio.run(scenario())
    layouts = [[ev for ev in valid(events) if ev["type"] == "partition_layout"] for events in rounds]
    # The first round with a bootstrap answer, then 12 s later: not at 5 s nor 10 s.
    assert [len(found) for found in layouts] == [1, 0, 0, 1]
    event = layouts[0][0]
    assert (event["cluster_id"], event["target"], event["complete"], event["default_min_insync"]) == (
        "layout-cluster", "pay", True, 1)
    orders = next(t for t in event["topics"] if t["name"] == "orders")
    assert orders["min_insync"] == 2
    assert orders["partitions"][1] == [1, -1, [1, 2, 3], [2]]


def test_the_layout_is_off_unless_configured():
    async def scenario() -> list[dict[str, Any]]:
        cluster = _cluster()
        broker = await FakeKafka(cluster, 1).start()
        cluster.brokers = [{"node_id": 1, "port": broker.port, "fenced": False}]
        try:
            return await Prober([target("pay", f"{HOST}:{broker.port}")],
                                ProbeOptions(timeout_ms=2000)).probe_round_async(T0)
        finally:
            await broker.stop()

    assert [ev for ev in asyncio.run(scenario()) if ev["type"] == "partition_layout"] == []


def test_a_metadata_answer_bigger_than_the_probes_frame_limit_is_read_within_the_layouts_bound():
    # A broker older than 3.8 answers the whole layout in one Metadata answer: 4,000 partitions
    # are ~100 KB, over a probe limited to 64 KiB per answer, and within the reading's 8 MiB.
    async def scenario() -> list[dict[str, Any]]:
        cluster = _cluster()
        cluster.partitions = {"big": [(p, 1, [1], [1]) for p in range(4000)]}
        broker = await FakeKafka(cluster, 1, pages=False).start()
        cluster.brokers = [{"node_id": 1, "port": broker.port, "fenced": False}]
        options = ProbeOptions(interval_ms=5000, timeout_ms=4000, source="probe-t", max_response_bytes=64 * 1024,
                               layout=LayoutLimits(interval_ms=12_000))
        try:
            return await Prober([target("pay", f"{HOST}:{broker.port}")], options).probe_round_async(T0)
        finally:
            await broker.stop()

    (event,) = [ev for ev in valid(asyncio.run(scenario())) if ev["type"] == "partition_layout"]
    assert event["complete"] and len(event["topics"][0]["partitions"]) == 4000
