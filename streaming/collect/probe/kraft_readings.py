"""KRaft readings of a round: broker heartbeats from DescribeQuorum's last fetch times, and
registrations from DescribeCluster v2 as `broker_state` events (see the package docstring)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from streaming.collect.probe.exchange import Answer
from streaming.contract import BrokerHeartbeat, BrokerState, event_to_dict

__all__ = ["LastReadings", "heartbeats", "registrations"]

UNKNOWN_EPOCH = -1  # Kafka's "no broker epoch"; DescribeQuorum does not report one


@dataclass
class LastReadings:
    """What earlier rounds read of a target's brokers, keyed by (cluster id, node id): the last
    fetch time already reported, and the registration (ONLINE or FENCED) last seen."""

    last_fetch: dict[tuple[str | None, int], int] = field(default_factory=dict)
    registrations: dict[tuple[str | None, int], str] = field(default_factory=dict)


def heartbeats(boot: Answer, answers: list[Answer], seen: LastReadings, source: str) -> list[dict[str, Any]]:
    """New last-fetch times of the cluster's brokers, merged over the round's quorum views."""
    brokers = {b.node_id for a in answers if a.cluster_id == boot.cluster_id for b in a.brokers or ()}
    brokers |= {node for (cluster, node) in seen.registrations if cluster == boot.cluster_id}
    latest: dict[int, tuple[int, int]] = {}
    for answer in answers:
        if answer.quorum is None or answer.cluster_id != boot.cluster_id:
            continue
        # Observers are brokers; voters are brokers only in the combined layout.
        replicas = {**{r: f for r, f in answer.quorum.voters.items() if r in brokers}, **answer.quorum.observers}
        for replica, fetch in replicas.items():
            if fetch[0] > latest.get(replica, (-1, -1))[0]:
                latest[replica] = fetch
    out = []
    for replica, (fetched, offset) in sorted(latest.items()):
        key = (boot.cluster_id, replica)
        if fetched < 0 or seen.last_fetch.get(key, -1) >= fetched:
            continue  # unknown, or no fetch since the last round: not a new heartbeat
        seen.last_fetch[key] = fetched
        out.append(event_to_dict(BrokerHeartbeat(
            ts=fetched, source=source, cluster_id=boot.cluster_id, broker_id=replica, kind="heartbeat",
            broker_epoch=UNKNOWN_EPOCH, metadata_offset=offset if offset >= 0 else None, fenced=None, rack=None,
            endpoints=None)))
    return out


def registrations(boot: Answer, seen: LastReadings, ts: int, source: str) -> list[dict[str, Any]]:
    """`broker_state` events for the registrations that changed since the last current view.

    Only DescribeCluster v2 (which lists fenced brokers) from a broker in touch with the
    controller is a current view of the registrations; anything else says nothing.
    """
    if boot.quorum is None or not boot.brokers or any(b.fenced is None for b in boot.brokers):
        return []
    now = {(boot.cluster_id, b.node_id): "FENCED" if b.fenced else "ONLINE" for b in boot.brokers}
    out = []
    gone = [key for key in seen.registrations if key[0] == boot.cluster_id and key not in now]
    for key in sorted(now, key=lambda k: k[1]):
        if seen.registrations.get(key) != now[key]:
            out.append(_state_event(ts, key, now[key], seen.registrations.get(key), source))
    for key in sorted(gone, key=lambda k: k[1]):
        out.append(_state_event(ts, key, "OFFLINE", seen.registrations.pop(key), source))
    seen.registrations.update(now)
    return out


def _state_event(ts: int, key: tuple[str | None, int], new: str, previous: str | None,
                 source: str) -> dict[str, Any]:
    return event_to_dict(BrokerState(
        ts=ts, source=source, cluster_id=key[0], broker_id=key[1], state=new, previous_state=previous,
        broker_epoch=None, reason="no longer registered" if new == "OFFLINE" else "DescribeCluster registration"))

