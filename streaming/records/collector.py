"""What a collector says of its own work (issue 41; streaming/detect/README.md, "Contract additions"):
the rounds it made, and the targets it watches. With them detection tells a collector that went
silent (blindness) from brokers that did (silence), and a target the collector was told to drop.

- `collector_round`: `source` finished a round of `target` at `ts` (its own clock), whatever the round
  found (answers or errors), after that round's other events. `cluster_id`: the cluster the target
  led to at its last successful bootstrap (null before any). `registered`: the node ids of every
  broker the cluster's controller had registered (fenced or not), when the round read that whole set
  from a bootstrap in touch with the controller (DescribeCluster v2), else null.
- `collector_targets`: `source` watches exactly `targets` from `ts` on (sent when it starts): a target
  it watched before and that is not listed has been removed from its configuration.

Both travel on the metadata topic: a round keyed by its cluster id, the targets by none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from streaming.records.contract_checks import INT32, Rejected, check_field, check_str

__all__ = ["MAX_REGISTERED", "MAX_TARGETS", "CollectorRound", "CollectorTargets", "collector_event_from_dict",
           "collector_event_to_dict"]

_MAX_NAME_CHARS = 255  # contract.MAX_NAME_CHARS: a target name is a name like the others
# More brokers than any cluster has, more targets than any probe watches: beyond, `too_long:<field>`.
MAX_REGISTERED = 100_000
MAX_TARGETS = 100_000
_SCHEMA = "fleetwatch.event/v1"  # contract.SCHEMA


@dataclass(frozen=True, slots=True)
class CollectorRound:
    ts: int
    source: str
    cluster_id: str | None
    target: str
    registered: tuple[int, ...] | None
    type: Literal["collector_round"] = "collector_round"


@dataclass(frozen=True, slots=True)
class CollectorTargets:
    ts: int
    source: str
    targets: frozenset[str]
    type: Literal["collector_targets"] = "collector_targets"
    cluster_id: None = None  # about no cluster: keyed by none, and no shard of a cluster's is its own


def _registered(raw: list[Any] | None) -> tuple[int, ...] | None:
    if raw is None:
        return None
    if len(raw) > MAX_REGISTERED:
        raise Rejected("too_long:registered", f"{len(raw)} node ids, at most {MAX_REGISTERED}")
    for value in raw:
        if value.__class__ is not int:
            raise Rejected("wrong_type:registered", repr(value)[:40])
        if not INT32[0] <= value <= INT32[1]:
            raise Rejected("out_of_range:registered", f"{value} does not fit in a signed 32-bit integer")
    return tuple(sorted(set(raw)))


def _targets(raw: list[Any]) -> frozenset[str]:
    if len(raw) > MAX_TARGETS:
        raise Rejected("too_long:targets", f"{len(raw)} targets, at most {MAX_TARGETS}")
    for value in raw:
        if value.__class__ is not str:
            raise Rejected("wrong_type:targets", type(value).__name__)
        if len(value) > _MAX_NAME_CHARS:
            raise Rejected("too_long:targets", f"a name of {len(value)} characters, at most {_MAX_NAME_CHARS}")
    return frozenset(raw)


def collector_event_from_dict(obj: dict[str, Any], kind: str, ts: int, source: str,
                              cluster_id: str | None) -> CollectorRound | CollectorTargets:
    """The record of a checked `collector_round` or `collector_targets` object (the common fields are
    checked by the caller, streaming.records.contract)."""
    if kind == "collector_round":
        return CollectorRound(ts=ts, source=source, cluster_id=cluster_id or None,
                              target=check_str(obj, "target", _MAX_NAME_CHARS),
                              registered=_registered(check_field(obj, "registered", list, required=False)))
    return CollectorTargets(ts=ts, source=source, targets=_targets(check_field(obj, "targets", list)))


def collector_event_to_dict(event: CollectorRound | CollectorTargets) -> dict[str, Any]:
    """The contract form of a record (streaming.records.contract.event_to_dict)."""
    if event.__class__ is CollectorRound:
        assert isinstance(event, CollectorRound)
        return {"schema": _SCHEMA, "type": event.type, "ts": event.ts, "source": event.source,
                "cluster_id": event.cluster_id, "target": event.target,
                "registered": None if event.registered is None else list(event.registered)}
    assert isinstance(event, CollectorTargets)
    return {"schema": _SCHEMA, "type": event.type, "ts": event.ts, "source": event.source, "cluster_id": None,
            "targets": sorted(event.targets)}
