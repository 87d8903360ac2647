"""What a KRaft cluster reports about itself, asked over the Kafka protocol with the collector's own
client: which brokers are registered and fenced (DescribeCluster), and which controller is active
(DescribeQuorum, KIP-919)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from streaming.workshop.kraft.node import KafkaNode, NodeFailed

__all__ = ["active_controller", "describe_brokers"]


async def describe_brokers(candidates: Iterable[KafkaNode], timeout_s: float) -> dict[int, bool]:
    """{broker id: fenced} from the first of `candidates` that answers DescribeCluster v2 (fenced
    brokers included)."""
    from streaming.collect.protocol import Connection

    last: Exception | None = None
    for node in candidates:
        loop = asyncio.get_running_loop()
        conn = Connection("127.0.0.1", node.client_port or 0, deadline=loop.time() + timeout_s,
                          client_id="fleetwatch-harness")
        try:
            await conn.open()
            await conn.negotiate()
            body = await conn.call("DescribeCluster", 2, {
                "IncludeClusterAuthorizedOperations": False, "EndpointType": 1, "IncludeFencedBrokers": True})
            return {b["BrokerId"]: b["IsFenced"] for b in body["Brokers"]}
        except Exception as exc:  # try the next broker
            last = exc
        finally:
            conn.close()
    raise NodeFailed(f"no broker answered DescribeCluster: {last}")


async def active_controller(controllers: Iterable[KafkaNode], timeout_s: float) -> int:
    """The active controller's id as the first running controller that knows it reports it (-1: none)."""
    from streaming.collect.protocol import Connection

    for node in (c for c in controllers if c.running):
        loop = asyncio.get_running_loop()
        conn = Connection("127.0.0.1", node.controller_port or 0, deadline=loop.time() + timeout_s,
                          client_id="fleetwatch-harness")
        try:
            await conn.open()
            await conn.negotiate()
            body = await conn.call("DescribeQuorum", 1, {
                "Topics": [{"TopicName": "__cluster_metadata", "Partitions": [{"PartitionIndex": 0}]}]})
            partition = body["Topics"][0]["Partitions"][0]
            if partition["ErrorCode"] == 0:  # only the leader answers; others say NOT_LEADER_OR_FOLLOWER
                return partition["LeaderId"]
        except Exception:
            continue
        finally:
            conn.close()
    return -1
