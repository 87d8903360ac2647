"""The detector: events read in, on time or late, applied in event-time order to the parts of the
state they are about, and the timers that are due at the end."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from .cluster import Cluster
from .collector import Collector
from .defaults import EVENT_TYPES, LATENESS, STATE_TTL
from .fleet import Fleet, address
from .incidents import Alerts
from .target import Target

__all__ = ["Detector", "Part", "detect", "read_events"]


class Part:
    """A part of the state that is forgotten as a whole (README "Forgetting"): a cluster, a target, a
    collector, the fleet."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make
        self.rules = make()
        self.last_event: int | None = None

    def heard(self, ts: int) -> Any:
        """An event of this part at `ts`: after more than a TTL of quiet, what fell due fires, and with
        nothing open the part starts over."""
        if self.last_event is not None and ts - self.last_event > STATE_TTL:
            for subject in self.rules.subjects():
                subject.advance(ts)
            if not self.rules.inc.open:
                self.rules = self.make()
        self.last_event = ts if self.last_event is None else max(self.last_event, ts)
        return self.rules


class Detector:
    def __init__(self, heartbeat_late_ms: int | None = None) -> None:
        self.heartbeat_late_ms = heartbeat_late_ms
        self.alerts = Alerts()
        self.clusters: dict[str, Part] = {}
        self.targets: dict[str, Part] = {}
        self.collectors: dict[str, Part] = {}
        self.fleet = Part(lambda: Fleet(self.alerts))

    def cluster(self, cluster_id: str | None, ts: int) -> Cluster:
        key = cluster_id or ""  # null and "" are one cluster without an id
        if key not in self.clusters:
            self.clusters[key] = Part(lambda: Cluster(cluster_id or None, self.alerts, lambda: self.fleet.rules,
                                                      self.heartbeat_late_ms))
        return self.clusters[key].heard(ts)

    def target(self, name: str, ts: int) -> Target:
        if name not in self.targets:
            self.targets[name] = Part(lambda: Target(name, self.alerts))
        return self.targets[name].heard(ts)

    def collector(self, source: str, ts: int) -> Collector:
        if source not in self.collectors:
            self.collectors[source] = Part(lambda: Collector(source, self.alerts))
        return self.collectors[source].heard(ts)

    def apply(self, ev: dict[str, Any], line: int) -> None:
        ts = ev["ts"]
        self.alerts.cause = (0, (ts, line))
        if ev["type"] == "collector_round":
            if ev["cluster_id"]:  # README: a round of no cluster goes to no shard
                self.on_round(ev)
            return
        if ev["type"] == "collector_targets":
            self.on_targets(ev["source"], set(ev["targets"]), ts)
            return
        if ev["type"] == "quorum_reading":
            self.on_reading(ev)
            return
        if ev["type"] == "partition_layout":
            cluster = self.cluster(ev["cluster_id"], ts)
            cluster.advance_brokers(ts)  # a deadline before the layout sees the layout before it
            cluster.layout.on_layout(ev)
            return
        if ev["type"] == "metadata_response":
            self.target(ev["target"], ts).on_response(ev)
            if ev.get("error") is None and ev["cluster_id"]:
                self.cluster(ev["cluster_id"], ts).on_response(ev)
                fleet = self.fleet.heard(ts)
                if ev["expected"] is None:
                    fleet.on_bootstrap(ev)
                if ev.get("brokers"):
                    cluster = self.cluster(ev["cluster_id"], ts)
                    cluster.advance_brokers(ts)
                    fleet.advertise(ev["cluster_id"], [(e["node_id"], frozenset([address(e)])) for e in ev["brokers"]],
                                    ts, ev["target"], listing=True)
                    cluster.leave_replaced(ts)
            return
        cluster = self.cluster(ev["cluster_id"], ts)
        cluster.on_broker_event(ev)
        fleet, cluster_id, broker_id = self.fleet.heard(ts), ev["cluster_id"], ev["broker_id"]
        if ev["type"] == "broker_heartbeat" and ev["kind"] == "registration" and ev.get("endpoints"):
            endpoints = frozenset(map(address, ev["endpoints"]))
            cluster.advance_brokers(ts)
            fleet.advertise(cluster_id, [(broker_id, endpoints)], ts, None, listing=False)
            cluster.leave_replaced(ts)
        elif ev["type"] == "broker_state" and ev["state"] == "OFFLINE":
            cluster.advance_brokers(ts)
            fleet.unregistered(cluster_id, broker_id, ts)
        else:
            fleet.confirmed(cluster_id, broker_id, ts)

    def on_round(self, ev: dict[str, Any], exact: frozenset[int] = frozenset()) -> None:
        ts, cluster_id = ev["ts"], ev["cluster_id"]
        cluster = self.cluster(cluster_id, ts)
        left = cluster.on_round(ev, exact)
        if left:
            fleet = self.fleet.heard(ts)
            for broker_id in left:
                fleet.unregistered(cluster_id, broker_id, ts)  # as at an OFFLINE `no longer registered`
        self.collector(ev["source"], ts).on_round(cluster_id, ev["target"], ts)

    def on_reading(self, ev: dict[str, Any]) -> None:
        """README "Before Kafka knows: quorum readings": heartbeats, the controller, a round, each broker."""
        ts, cluster_id = ev["ts"], ev["cluster_id"]
        cluster = self.cluster(cluster_id, ts)
        cluster.on_reading(ev)
        self.on_round({"ts": ts, "cluster_id": cluster_id, "source": ev["source"], "target": ev["target"]},
                      frozenset(node for node, age, _ in ev["fetches"] if age is not None))
        cluster.on_reading_brokers(ev)
        fleet = self.fleet.heard(ts)
        for node, _, _ in ev["fetches"]:
            fleet.confirmed(cluster_id, node, ts)  # heard of, as by a heartbeat

    def on_targets(self, source: str, watched: set[str], ts: int) -> None:
        """README "Collectors": `source` watches exactly `watched` from `ts` on. A cluster or a target that no
        collector watches any more is removed: its alerts resolve with the reason, what the fleet holds of
        it is handed back, and it is forgotten. No news of any part (no TTL renewal)."""
        reason = f"target removed: {source} no longer watches it"
        for key, part in list(self.clusters.items()):
            if part.rules.rounds.drop(source, watched):
                part.rules.remove(ts, reason)
                self.fleet.rules.withdraw_cluster(key, ts)
                del self.clusters[key]
        for name, part in list(self.targets.items()):
            if name not in watched and part.rules.dropped_by(source):
                part.rules.remove(ts, reason)
                self.fleet.rules.release(name, ts)
                del self.targets[name]
        if source in self.collectors:
            self.collectors[source].rules.drop(watched, ts)

    def finish(self, watermark: int) -> None:
        """The end of the input is not silence: timers fire up to the final watermark only."""
        for part in [*self.clusters.values(), *self.targets.values(), *self.collectors.values(), self.fleet]:
            for subject in part.rules.subjects():
                subject.advance(watermark)


def read_events(lines: Iterable[bytes | str]) -> tuple[list[tuple[int, int, dict[str, Any]]], int, int]:
    """(ts, line, event) of the events on time, and how many lines were late or not events."""
    events, late, skipped, latest = [], 0, 0, None
    for line_no, raw in enumerate(lines):
        try:
            ev = json.loads(raw)
            ok = (ev["schema"] == "fleetwatch.event/v1" and ev["type"] in EVENT_TYPES
                  and type(ev["ts"]) is int and isinstance(ev["source"], str))
        except (ValueError, KeyError, TypeError):
            ok = False
        if not ok:
            skipped += 1
            continue
        if latest is not None and ev["ts"] < latest - LATENESS:
            late += 1  # it arrived after the watermark had passed it: it changes nothing
            continue
        latest = ev["ts"] if latest is None else max(latest, ev["ts"])
        events.append((ev["ts"], line_no, ev))
    return events, late, skipped


def detect(lines: Iterable[bytes | str], heartbeat_late_ms: int | None = None) -> tuple[list[dict[str, Any]], int, int]:
    """The alert lines for a stream of JSONL lines, in output order; and the late and skipped counts.
    `heartbeat_late_ms`: broker.heartbeat_late's age (off by default, as `rules.heartbeat_late_ratio`)."""
    events, late, skipped = read_events(lines)
    detector = Detector(heartbeat_late_ms)
    for _, line_no, ev in sorted(events, key=lambda e: (e[0], e[1])):
        detector.apply(ev, line_no)
    if events:
        detector.finish(max(ts for ts, _, _ in events) - LATENESS)
    return detector.alerts.sorted(), late, skipped
