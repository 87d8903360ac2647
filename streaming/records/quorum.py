"""The `quorum_reading` event (issue 44; streaming/detect/README.md, "Contract additions"): one reading of a
cluster's KRaft quorum by a collector, apart from its rounds: how old each broker's last fetch from the
active controller is as seen now, and whether the controller has it fenced.

A healthy broker fetches from the KRaft leader at least every 500 ms (the leader appends a record every
500 ms and a fetch waits at most that long), so a fetch a few seconds old is a broker that stopped, seen
seconds before its controller fences it (Kafka: 9 s of no heartbeat). The probe reads it every
`probe.quorum_interval_ms` (1 s) with one DescribeQuorum and one DescribeCluster per cluster.

    {"schema":"fleetwatch.event/v1","type":"quorum_reading","ts":1763800001000,"source":"probe-1",
     "cluster_id":"MkU3OEVBNTcwNTJENDM2Qg","target":"payments-eu1","controller_id":3000,"controller_epoch":7,
     "fetches":[[1,120,false],[2,80,false],[3,2630,false]]}

- `ts`: on the collector's clock, when it got the answer (SPEC section 3's one clock).
- `controller_id` (int32): the active controller that answered (DescribeQuorum's LeaderId); a reading is
  made only with one. `controller_epoch` (int64 or null): its term (LeaderEpoch), as a response's.
- `fetches`: `[node_id, fetch_age_ms, fenced]` per broker the reading saw (the quorum's observers, and
  voters that are brokers): `fetch_age_ms` is the controller's now minus when the broker's last fetch
  reached it (its LastCaughtUpTimestamp within 500 ms of its LastFetchTimestamp, else the latter), both on
  the controller's clock (null: no fetch of it in this controller's term, Kafka's -1); `fenced`
  the broker's registration (DescribeCluster v2; null when not read). int32 ids, ages 0..2^31-1, at most
  `MAX_FETCHES` entries, else `wrong_type:fetches`, `out_of_range:fetches`, `too_long:fetches`.

Keyed by the cluster id on the metadata topic. An older job quarantines it (`unknown_type`): upgrade the
job before the probe, as for `collector_round`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from streaming.records.contract_checks import INT32, INT64, Rejected, check_field, check_int, check_str

__all__ = ["MAX_FETCHES", "Fetch", "QuorumReading", "reading_from_dict", "reading_to_dict"]

_MAX_NAME_CHARS = 255  # contract.MAX_NAME_CHARS: a target name is a name like the others
_SCHEMA = "fleetwatch.event/v1"  # contract.SCHEMA
# More brokers than any cluster has (collector.MAX_REGISTERED): beyond, `too_long:fetches`.
MAX_FETCHES = 100_000
# One broker as a reading saw it: (node id, fetch age in ms or None when unknown, fenced or None).
Fetch = tuple[int, int | None, bool | None]


@dataclass(frozen=True, slots=True)
class QuorumReading:
    ts: int
    source: str
    cluster_id: str  # never null or empty: see missing_cluster_id
    target: str
    controller_id: int
    controller_epoch: int | None
    fetches: tuple[Fetch, ...]
    type: Literal["quorum_reading"] = "quorum_reading"


def _fetches(raw: list[Any]) -> tuple[Fetch, ...]:
    if len(raw) > MAX_FETCHES:
        raise Rejected("too_long:fetches", f"{len(raw)} brokers, at most {MAX_FETCHES}")
    out = []
    for item in raw:
        if item.__class__ is not list or len(item) != 3:
            raise Rejected("wrong_type:fetches", repr(item)[:40])
        node, age, fenced = item
        if node.__class__ is not int or (age is not None and age.__class__ is not int) or (
                fenced is not None and fenced.__class__ is not bool):
            raise Rejected("wrong_type:fetches", repr(item)[:40])
        if not INT32[0] <= node <= INT32[1] or (age is not None and not 0 <= age <= INT32[1]):
            raise Rejected("out_of_range:fetches", repr(item)[:40])
        out.append((node, age, fenced))
    return tuple(out)


def reading_from_dict(obj: dict[str, Any], ts: int, source: str, cluster_id: str) -> QuorumReading:
    """The record of a checked `quorum_reading` object (the common fields and a non-empty cluster id are
    checked by the caller, streaming.records.contract)."""
    return QuorumReading(ts=ts, source=source, cluster_id=cluster_id,
                         target=check_str(obj, "target", _MAX_NAME_CHARS),
                         controller_id=check_int(obj, "controller_id", INT32),
                         controller_epoch=check_int(obj, "controller_epoch", INT64, required=False),
                         fetches=_fetches(check_field(obj, "fetches", list)))


def reading_to_dict(event: QuorumReading) -> dict[str, Any]:
    """The contract form of a record (streaming.records.contract.event_to_dict)."""
    return {"schema": _SCHEMA, "type": event.type, "ts": event.ts, "source": event.source,
            "cluster_id": event.cluster_id, "target": event.target, "controller_id": event.controller_id,
            "controller_epoch": event.controller_epoch, "fetches": [list(f) for f in event.fetches]}
