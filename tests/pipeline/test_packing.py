"""The hand-over between the job's parse and detection stages: what is packed comes back equal."""

from __future__ import annotations

import itertools

import orjson

from streaming.collect.simulate import FAULT_KINDS, FleetSpec, Simulation
from streaming.pipeline.packing import pack, unpack
from streaming.records.contract import (
    Broker,
    BrokerHeartbeat,
    BrokerState,
    Endpoint,
    Expected,
    MetadataResponse,
    PartitionLayout,
    QuorumReading,
    TopicLayout,
    parse_message,
)

EDGE_CASES = [
    MetadataResponse(1, "probe-a", "c1", "t1", "h:9092", Expected("c1", 3), 3, 2, None, 4,
                     (Broker(1, "h1", 9092, "r1", False), Broker(2, "h2", 9092, None, None))),
    MetadataResponse(2, "probe-a", None, "t1", "h:9092", None, None, None, "timeout", None, None),
    MetadataResponse(3, "probe-b", "c1", "t2", "h:9093", Expected(None, None), 1, 1, None, 1, ()),
    BrokerHeartbeat(4, "ctl", "c1", 1, "registration", 7, 10, True, "r1",
                    (Endpoint("h1", 9092, "PLAINTEXT", "PLAINTEXT"), Endpoint("h1", 9093, None, None))),
    BrokerHeartbeat(5, "ctl", None, 2, "heartbeat", -1, None, None, None, None),
    BrokerState(6, "ctl", "c1", 1, "FENCED", "ONLINE", 7, "session timeout"),
    BrokerState(7, "ctl", "c1", 1, "ONLINE", None, None, None),
    PartitionLayout(8, "probe-a", "c1", "t1", False, 2,
                    (TopicLayout("orders", None, ((0, 1, (1, 2, 3), (1, 2)), (1, -1, (2,), ()))),
                     TopicLayout("empty", 3, ()))),
    QuorumReading(9, "probe-a", "c1", "t1", 3000, 7, ((1, 120, False), (2, None, None), (3, 2630, True))),
    QuorumReading(10, "probe-a", "c1", "t1", 3001, None, ()),
]


def test_every_kind_of_event_comes_back_equal() -> None:
    items = [(f"shard-{i % 3}", "topic:0", i, event) for i, event in enumerate(EDGE_CASES)]
    assert unpack(pack(items)) == items


def test_a_simulated_fleet_comes_back_equal_with_broker_lists_shared() -> None:
    spec = FleetSpec(clusters=5, brokers=4, faults=FAULT_KINDS, start_ms=1_764_000_000_000,
                     duration_ms=60_000, fault_every_ms=10_000)
    events = [parse_message(orjson.dumps(value).decode())
              for _, value in itertools.islice(Simulation(spec).events(), 3000)]
    items = [("s", "topic:1", offset, event) for offset, event in enumerate(events)]
    back = unpack(pack(items))
    assert back == items
    responses = [event for _, _, _, event in back if isinstance(event, MetadataResponse) and event.brokers]
    assert len(responses) > 100
    # One tuple of Broker instances per distinct list, not one per response.
    assert len({id(r.brokers) for r in responses}) == len({r.brokers for r in responses})


def test_an_empty_pack() -> None:
    assert unpack(pack([])) == []
