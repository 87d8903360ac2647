"""Telemetry's steady state, parsed once: a message that repeats an earlier one but for its time.

Most of a fleet's telemetry says again what it said last time: a broker's heartbeat differs from its
last one in `ts` and `metadata_offset` alone, a metadata response from the same endpoint's last one in
`ts` and `latency_ms` alone. `RecurringMessages.parse` is `contract.parse_message` that validates
and builds such a message's record once: it keeps the record of each message it accepted under a
digest of the message without those fields, and a message with the same digest takes that record
with its own values of them, checked by the checks `event_from_dict` makes of them (a refusal names
the same reason). Every other message takes `parse_message`'s whole path.

The digest is of the decoded message written out again (orjson), not of its text: JSON's duplicate
keys, spacing and escapes then cannot make two messages that decode differently look alike, nor need
they be spelled alike; the order of the fields is part of it (each producer keeps its own). It is
blake2b's 128 bits: among the 10^5 messages a worker keeps, a collision has odds of about 10^-29.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import orjson

from streaming.records.contract import (
    BrokerHeartbeat,
    Event,
    MetadataResponse,
    check_message_topic,
    decode_message,
    event_from_dict,
    event_time,
)
from streaming.records.contract_checks import INT64, check_int

__all__ = ["RecurringMessages"]


def _heartbeat_at(known: Event, ts: int, metadata_offset: int | None) -> Event:
    assert isinstance(known, BrokerHeartbeat)
    return BrokerHeartbeat(ts, known.source, known.cluster_id, known.broker_id, known.kind, known.broker_epoch,
                           metadata_offset, known.fenced, known.rack, known.endpoints)


def _response_at(known: Event, ts: int, latency_ms: int | None) -> Event:
    assert isinstance(known, MetadataResponse)
    return MetadataResponse(ts, known.source, known.cluster_id, known.target, known.endpoint, known.expected,
                            known.responder_node_id, known.controller_id, known.error, latency_ms, known.brokers,
                            controller_known=known.controller_known, controller_epoch=known.controller_epoch)


# type -> the field besides `ts` that changes from one message to the next (an optional signed 64-bit
# integer in both), and how a known record takes the new values
_RECURRING: dict[str, tuple[str, Callable[[Event, int, int | None], Event]]] = {
    "broker_heartbeat": ("metadata_offset", _heartbeat_at),
    "metadata_response": ("latency_ms", _response_at),
}
_ABSENT = object()


class RecurringMessages:
    """`parse_message` with a memory of the records of recurring messages; at most `capacity` of them
    (all forgotten at once when full: a fleet's steady state fills it again within a round)."""

    def __init__(self, capacity: int = 100_000) -> None:
        self.capacity = capacity
        self._known: dict[bytes, Event] = {}

    def parse(self, raw: str | bytes | None, topic: str | None, latest_ts_ms: int) -> Event:
        """As `parse_message(raw, topic, latest_ts_ms)`: the same record, or the same refusal."""
        obj = decode_message(raw)
        kind = obj.get("type") if obj.__class__ is dict else None
        recurring = _RECURRING.get(kind) if kind.__class__ is str else None
        if recurring is None:
            event = event_from_dict(obj, latest_ts_ms)
        else:
            name, at = recurring
            ts, value = obj.pop("ts", _ABSENT), obj.pop(name, _ABSENT)
            try:
                digest = hashlib.blake2b(orjson.dumps(obj), digest_size=16).digest()
            except orjson.JSONEncodeError:  # nested deeper than orjson writes: not a message to remember
                digest = None
            if ts is not _ABSENT:
                obj["ts"] = ts
            if value is not _ABSENT:
                obj[name] = value
            known = self._known.get(digest) if digest is not None else None
            if known is not None:
                event = at(known, event_time(obj, latest_ts_ms), check_int(obj, name, INT64, required=False))
            else:
                event = event_from_dict(obj, latest_ts_ms)
                if digest is not None:
                    if len(self._known) >= self.capacity:
                        self._known.clear()
                    self._known[digest] = event
        check_message_topic(event, topic)
        return event
