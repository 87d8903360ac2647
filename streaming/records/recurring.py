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

What it keeps is what recurs now: records in two generations, those asked for in this one and those
of the last one not asked for since. A record asked for moves from the last generation to this one;
what is left in the last is forgotten when a generation ends: after `generation` recurring messages,
or when the two hold `capacity` records (all forgotten then if every one was asked for in this
generation). A message that no longer comes (a broker's earlier epoch, a fleet that left: a worker
that read a backlog's fleet kept ~37,000 of its records, ~30 MB, for the live fleet after it) leaves
within two generations, and a steady state below the capacity, each message of which comes again
within a generation, stays whole across them.
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
    """`parse_message` with a memory of the records of recurring messages: at most `capacity` of them,
    in two generations of at most `generation` recurring messages each (the module's docstring)."""

    def __init__(self, capacity: int = 100_000, generation: int = 100_000) -> None:
        self.capacity = capacity
        self.generation = generation
        self._current: dict[bytes, Event] = {}
        self._last: dict[bytes, Event] = {}
        self._seen = 0  # recurring messages parsed in this generation

    def __len__(self) -> int:
        """How many records it holds."""
        return len(self._current) + len(self._last)

    def _recall(self, digest: bytes) -> Event | None:
        """The last generation's record of `digest`, moved on to this one; None when not there."""
        known = self._last.pop(digest, None)
        if known is not None:
            self._remember(digest, known)
        return known

    def _remember(self, digest: bytes, event: Event) -> None:
        while (self._current or self._last) and len(self._current) + len(self._last) >= self.capacity:
            self._end_generation()
        self._current[digest] = event

    def _end_generation(self) -> None:
        self._last, self._current, self._seen = self._current, {}, 0

    def parse(self, raw: str | bytes | None, topic: str | None, latest_ts_ms: int) -> Event:
        """As `parse_message(raw, topic, latest_ts_ms)`: the same record, or the same refusal."""
        obj = decode_message(raw)
        kind = obj.get("type") if obj.__class__ is dict else None
        recurring = _RECURRING.get(kind) if kind.__class__ is str else None
        if recurring is None:
            event = event_from_dict(obj, latest_ts_ms)
        else:
            if self._seen >= self.generation:
                self._end_generation()
            self._seen += 1
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
            known = None
            if digest is not None:
                known = self._current.get(digest)
                if known is None:
                    known = self._recall(digest)
            if known is not None:
                event = at(known, event_time(obj, latest_ts_ms), check_int(obj, name, INT64, required=False))
            else:
                event = event_from_dict(obj, latest_ts_ms)
                if digest is not None:
                    self._remember(digest, event)
        check_message_topic(event, topic)
        return event
