"""How the job's parse stage hands validated events to its detection stage.

Many events travel in one value: a list of (shard, source, offset, event) packed with
`marshal`, each event as a tuple of plain values. Against one JSON text per row, re-parsed
behind the shuffle, this saves the per-row costs of the shuffle and of Spark's Python stateful
operator (which walks its input row by row in Python), and the second validation.

A metadata response lists every broker of its cluster, and the list hardly changes between
responses: a pack keeps each distinct broker list once, and the events refer to it by index.
Unpacking then builds each list's Broker instances once per pack, not once per event.

Nothing is validated on the way out: every event was validated when it was parsed, and a pack
lives only inside one micro-batch.
"""

from __future__ import annotations

import marshal
from collections.abc import Sequence
from typing import Any

from streaming.records.contract import (
    Broker,
    BrokerHeartbeat,
    BrokerState,
    CollectorRound,
    CollectorTargets,
    Endpoint,
    Event,
    Expected,
    MetadataResponse,
    PartitionLayout,
    QuorumReading,
    TopicLayout,
    known_broker,
)

__all__ = ["pack", "unpack"]

PackedItem = tuple[str, str, int, Event]

# The first value of an event's tuple says its type.
_RESPONSE, _STATE, _HEARTBEAT, _LAYOUT, _ROUND, _TARGETS, _READING = 0, 1, 2, 3, 4, 5, 6


def pack(items: Sequence[PackedItem]) -> bytes:
    """(shard, source, offset, event) items -> one bytes value."""
    broker_lists: dict[tuple[int, ...], int] = {}
    table: list[tuple[tuple[Any, ...], ...]] = []

    def brokers_index(brokers: tuple[Broker, ...]) -> int:
        # Equal entries of a parse are one shared Broker instance (contract.known_broker), so the
        # instances' ids identify a list cheaply while the events are alive.
        key = tuple(map(id, brokers))
        index = broker_lists.get(key)
        if index is None:
            index = broker_lists[key] = len(table)
            table.append(tuple((b.node_id, b.host, b.port, b.rack, b.fenced) for b in brokers))
        return index

    rows = []
    for shard, source, offset, event in items:
        if event.__class__ is MetadataResponse:
            x, brokers = event.expected, event.brokers
            row: tuple[Any, ...] = (
                _RESPONSE, event.ts, event.source, event.cluster_id, event.target, event.endpoint,
                None if x is None else (x.cluster_id, x.node_id), event.responder_node_id, event.controller_id,
                event.error, event.latency_ms, None if brokers is None else brokers_index(brokers),
                event.controller_known, event.controller_epoch)
        elif event.__class__ is BrokerHeartbeat:
            endpoints = event.endpoints
            row = (_HEARTBEAT, event.ts, event.source, event.cluster_id, event.broker_id, event.kind,
                   event.broker_epoch, event.metadata_offset, event.fenced, event.rack,
                   None if endpoints is None else tuple((e.host, e.port, e.listener, e.security_protocol)
                                                        for e in endpoints))
        elif event.__class__ is PartitionLayout:
            row = (_LAYOUT, event.ts, event.source, event.cluster_id, event.target, event.complete,
                   event.default_min_insync, tuple((t.name, t.min_insync, t.partitions) for t in event.topics))
        elif event.__class__ is CollectorRound:
            row = (_ROUND, event.ts, event.source, event.cluster_id, event.target, event.registered)
        elif event.__class__ is CollectorTargets:
            row = (_TARGETS, event.ts, event.source, tuple(sorted(event.targets)))
        elif event.__class__ is QuorumReading:
            row = (_READING, event.ts, event.source, event.cluster_id, event.target, event.controller_id,
                   event.controller_epoch, event.fetches)
        else:
            assert event.__class__ is BrokerState
            row = (_STATE, event.ts, event.source, event.cluster_id, event.broker_id, event.state,
                   event.previous_state, event.broker_epoch, event.reason)
        rows.append((shard, source, offset, row))
    return marshal.dumps((table, rows))


def unpack(packed: bytes) -> list[PackedItem]:
    """The items `pack` was given, equal to them."""
    table, rows = marshal.loads(packed)
    broker_lists = [tuple(map(known_broker, entries)) for entries in table]
    items: list[PackedItem] = []
    for shard, source, offset, row in rows:
        kind = row[0]
        event: Event
        if kind == _HEARTBEAT:
            _, ts, src, cluster_id, broker_id, hb_kind, epoch, metadata_offset, fenced, rack, endpoints = row
            event = BrokerHeartbeat(ts, src, cluster_id, broker_id, hb_kind, epoch, metadata_offset, fenced, rack,
                                    None if endpoints is None else tuple(Endpoint(*e) for e in endpoints))
        elif kind == _RESPONSE:
            (_, ts, src, cluster_id, target, endpoint, expected, responder, controller, error, latency, brokers,
             controller_known, controller_epoch) = row
            event = MetadataResponse(ts, src, cluster_id, target, endpoint,
                                     None if expected is None else Expected(*expected), responder, controller,
                                     error, latency, None if brokers is None else broker_lists[brokers],
                                     controller_known=controller_known, controller_epoch=controller_epoch)
        elif kind == _LAYOUT:
            _, ts, src, cluster_id, target, complete, default_min, layouts = row
            event = PartitionLayout(ts, src, cluster_id, target, complete, default_min,
                                    tuple(TopicLayout(*t) for t in layouts))
        elif kind == _ROUND:
            event = CollectorRound(*row[1:])
        elif kind == _TARGETS:
            _, ts, src, targets = row
            event = CollectorTargets(ts, src, frozenset(targets))
        elif kind == _READING:
            event = QuorumReading(*row[1:])
        else:
            event = BrokerState(*row[1:])
        items.append((shard, source, offset, event))
    return items
