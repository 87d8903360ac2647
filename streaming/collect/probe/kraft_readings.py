"""KRaft readings of a round: broker heartbeats from DescribeQuorum's last fetch times, and
registrations from DescribeCluster v2 as `broker_state` events (see the package docstring).

One clock per probe (SPEC section 3, amended 2026-11-26): every `ts` is on the probe's clock. A
LastFetchTimestamp is on the KRaft leader's clock, which may be seconds off: it is only ever
compared with the same leader's clock (its age, and whether it moved), never used as a time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from streaming.collect.probe.exchange import Answer
from streaming.records.contract import UNREGISTERED, BrokerHeartbeat, BrokerState, event_to_dict

__all__ = ["LastReadings", "fetch_time", "heartbeats", "registered", "registrations"]

UNKNOWN_EPOCH = -1  # Kafka's "no broker epoch"; DescribeQuorum does not report one


@dataclass
class LastReadings:
    """What earlier rounds read of a target's brokers, keyed by (cluster id, node id): the last
    fetch already reported, as (leader epoch, LastFetchTimestamp on that leader's clock), and the
    registration (ONLINE or FENCED; STOPPING from the controller's view) last published, and the latest
    heartbeat `ts` published, by either reading (controller_view.py deduplicates against both); and the
    probe-clock time each broker's latest fetch was first given (`fetch_time`)."""

    last_fetch: dict[tuple[str | None, int], tuple[int, int]] = field(default_factory=dict)
    registrations: dict[tuple[str | None, int], str] = field(default_factory=dict)
    last_heartbeat: dict[tuple[str | None, int], int] = field(default_factory=dict)
    fetched_at: dict[tuple[str | None, int], tuple[tuple[int, int], int]] = field(default_factory=dict)


def fetch_time(seen: LastReadings, key: tuple[str | None, int], mark: tuple[int, int], ts: int) -> int:
    """The probe-clock time of the fetch `mark` (leader epoch, LastFetchTimestamp) of broker `key`: the time
    it was first given, whichever reading gave it (a round's heartbeat, a quorum reading's age), else `ts`.
    One fetch has one time: converted anew at each reading (the receive time minus the age) it moves by
    the readings' delays, and a round's heartbeat of a fetch a quorum reading already dated a few ms later
    would read as a newer heartbeat (a stall resolved by the fetch that started it)."""
    known = seen.fetched_at.get(key)
    if known is not None and known[0] == mark:
        return known[1]
    if known is None or mark > known[0]:
        seen.fetched_at[key] = (mark, ts)
    return ts


def heartbeats(boot: Answer, answers: list[Answer], seen: LastReadings, source: str,
               received: Callable[[Answer], int]) -> list[dict[str, Any]]:
    """New last fetches of the cluster's brokers, merged over the round's quorum views, as heartbeats
    stamped on the probe's clock (`received(answer)`: when the probe got that answer).

    A fetch's age is the leader's now (`Quorum.leader_now`) minus its LastFetchTimestamp, both on
    the leader's clock; the heartbeat's `ts` is the probe's receive time minus that age. An answer
    that does not tell the leader's now gives no heartbeat: a raw remote time never becomes a `ts`.
    Whether a fetch is new is decided on the leader's clock as well: (leader epoch, raw
    LastFetchTimestamp) later than the last one reported. A new epoch is a new leader (perhaps
    another node, another clock) whose recorded fetches all came after it took over.
    """
    brokers = {b.node_id for a in answers if a.cluster_id == boot.cluster_id for b in a.brokers or ()}
    brokers |= {node for (cluster, node) in seen.registrations if cluster == boot.cluster_id}
    latest: dict[int, tuple[tuple[int, int], int, int]] = {}  # replica -> (mark, ts, log end offset)
    for answer in answers:
        quorum = answer.quorum
        if quorum is None or answer.cluster_id != boot.cluster_id:
            continue
        leader_now = quorum.leader_now
        if leader_now is None:
            continue  # no reference on the leader's clock: its times say nothing to us
        at = received(answer)
        # Observers are brokers; voters are brokers only in the combined layout.
        replicas = {**{r: f for r, f in quorum.voters.items() if r in brokers}, **quorum.observers}
        for replica, (fetched, offset) in replicas.items():
            if fetched < 0:
                continue  # unknown: no fetch from this replica in the leader's term
            mark, ts = (quorum.leader_epoch, fetched), at - max(0, leader_now - fetched)
            known = latest.get(replica)
            if known is None or mark > known[0] or (mark == known[0] and ts < known[1]):
                # The same fetch seen in two answers: the earlier time is the one less delayed.
                latest[replica] = (mark, ts, offset)
    out = []
    for replica, (mark, ts, offset) in sorted(latest.items()):
        key = (boot.cluster_id, replica)
        ts = fetch_time(seen, key, mark, ts)
        if seen.last_fetch.get(key, (-1, -1)) >= mark:
            continue  # no fetch since the last round: not a new heartbeat
        seen.last_fetch[key] = mark
        seen.last_heartbeat[key] = max(ts, seen.last_heartbeat.get(key, ts))
        out.append(event_to_dict(BrokerHeartbeat(
            ts=ts, source=source, cluster_id=boot.cluster_id, broker_id=replica, kind="heartbeat",
            broker_epoch=UNKNOWN_EPOCH, metadata_offset=offset if offset >= 0 else None, fenced=None, rack=None,
            endpoints=None)))
    return out


def registered(boot: Answer) -> tuple[int, ...] | None:
    """The node ids of every broker the controller has registered, when the bootstrap read that whole set
    (DescribeCluster v2 from a broker in touch with the controller: `registrations` below), else None."""
    if boot.quorum is None or not boot.brokers or any(b.fenced is None for b in boot.brokers):
        return None
    return tuple(sorted({b.node_id for b in boot.brokers}))


def registrations(boot: Answer, seen: LastReadings, ts: int, source: str) -> list[dict[str, Any]]:
    """`broker_state` events for the registrations that changed since the last current view.

    Only DescribeCluster v2 (which lists fenced brokers) from a broker in touch with the
    controller is a current view of the registrations; anything else says nothing. An unfenced
    broker that the controller's view last saw STOPPING is still STOPPING for DescribeCluster,
    which cannot tell a controlled shutdown from ONLINE.
    """
    if registered(boot) is None:
        return []
    now = {(boot.cluster_id, b.node_id): "FENCED" if b.fenced else "ONLINE" for b in boot.brokers}
    now |= {key: "STOPPING" for key, state in now.items()
            if state == "ONLINE" and seen.registrations.get(key) == "STOPPING"}
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
        broker_epoch=None, reason=UNREGISTERED if new == "OFFLINE" else "DescribeCluster registration"))

