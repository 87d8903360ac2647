"""One cluster id's part of the state: its brokers, its controller and the rounds that observe it, and
how a response or a round of the cluster reaches each."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .broker import Broker
from .controller import Controller
from .defaults import SESSION_TIMEOUT
from .fleet import Fleet
from .incidents import Alerts, Incidents
from .partitions import Layout
from .rounds import Rounds

# README "Contract additions" and "Broker rules": the reason of a broker_state OFFLINE read from the
# controller's registrations (the broker was unregistered); a crash reported by an agent has another.
UNREGISTERED = "no longer registered"

__all__ = ["Cluster"]


class Cluster:
    """Broker and controller rules of one cluster id (README "Forgetting": a cluster shard)."""

    def __init__(self, cluster_id: str | None, alerts: Alerts, fleet: Callable[[], Fleet],
                 heartbeat_late_ms: int | None = None) -> None:
        self.cluster_id = cluster_id
        self.fleet = fleet
        self.heartbeat_late_ms = heartbeat_late_ms
        self.inc = Incidents(alerts)
        self.brokers: dict[int, Broker] = {}
        self.rounds = Rounds()
        self.controller = Controller(cluster_id or "", self.inc, self.rounds.until)
        self.layout = Layout(cluster_id or "", self.inc)
        self.inc.impact = self.layout.impact
        self.last_target: str | None = None  # of its latest successful response: its alerts' name
        self.inc.last_target = lambda: self.last_target
        self.inc.broker_place = lambda broker_id: (
            self.brokers[broker_id].place() if broker_id in self.brokers else (None, None))

    def subjects(self) -> list[Broker | Controller]:
        return [*self.brokers.values(), self.controller]

    def broker(self, broker_id: int, now: int) -> Broker:
        """The broker, heard of at `now`, with what fell due before `now` fired; quiet for longer than
        the TTL with nothing open, it starts over."""
        if broker_id in self.brokers:
            self.brokers[broker_id].advance(now)
            if self.brokers[broker_id].forgotten(now):
                del self.brokers[broker_id]
        if broker_id not in self.brokers:
            self.brokers[broker_id] = Broker(self.cluster_id, broker_id, self.inc, self.heartbeat_late_ms,
                                             self.replaced, self.rounds.until)
            self.brokers[broker_id].held = self.controller.none_since is not None
        broker = self.brokers[broker_id]
        broker.last_heard = max(broker.last_heard, now)
        return broker

    def replaced(self, broker: Broker, now: int) -> bool:
        return self.fleet().taken_from(self.cluster_id or "", broker.broker_id, broker.addresses, now)

    def advance_brokers(self, now: int) -> None:
        """Before the cluster's advertisements change at `now`: a heartbeat deadline before it is
        decided with the advertisements of its own moment."""
        for broker in self.brokers.values():
            broker.advance(now)

    def leave_replaced(self, now: int) -> None:
        """After an advertisement: a heartbeat-lost broker that another node id replaced leaves."""
        for broker in self.brokers.values():
            if (not broker.gone and self.inc.firing("broker.heartbeat_lost", broker.subject)
                    and self.replaced(broker, now)):
                broker.leave(now)

    def on_broker_event(self, ev: dict[str, Any]) -> None:
        broker = self.broker(ev["broker_id"], ev["ts"])
        if ev["type"] == "broker_heartbeat":
            broker.on_heartbeat(ev)
        elif ev["state"] == "OFFLINE" and ev.get("reason") == UNREGISTERED:
            broker.leave(ev["ts"])  # gone from the controller's registrations, not down
        else:
            broker.on_state(ev)

    def on_response(self, r: dict[str, Any]) -> None:
        ts = r["ts"]
        self.controller.advance(ts)
        if r["target"] != self.last_target:
            self.advance_brokers(ts)  # what fell due before it is named after the target that reported it then
            self.last_target = r["target"]
        self.controller_reported(r)
        for entry in r.get("brokers") or ():
            self.broker(entry["node_id"], ts).on_listed(entry, r)
        if r.get("responder_node_id") is not None:
            self.broker(r["responder_node_id"], ts).on_answer(r)

    def controller_reported(self, r: dict[str, Any]) -> None:
        """The controller a response (or a quorum reading) names: a takeover restarts every session, no
        controller holds them, a controller named again releases them."""
        ts = r["ts"]
        held = self.controller.none_since is not None
        takeover = self.controller.on_response(r)
        holds = self.controller.none_since is not None
        if takeover or held != holds:
            for broker_id, broker in list(self.brokers.items()):
                broker.advance(ts)
                if broker.forgotten(ts):
                    del self.brokers[broker_id]  # as its next event would have: it starts over
                    continue
                broker.held = holds  # no active controller reported: nobody holds the sessions
                if takeover:
                    broker.restart_session(ts)  # a new active controller gives every registered broker a full session
                else:
                    broker.advance(ts)  # released by the same controller: a held deadline stands

    def on_reading(self, ev: dict[str, Any]) -> None:
        """README "Before Kafka knows: quorum readings", steps 1, 2 and 4 (the detector makes step 3 a round)."""
        ts = ev["ts"]
        self.controller.advance(ts)
        # 1. each fetch under a session old, after the broker's last heartbeat, is a heartbeat at its own time
        for at, node in sorted((ts - age, node) for node, age, _ in ev["fetches"]
                               if age is not None and age < SESSION_TIMEOUT):
            known = self.brokers.get(node)
            if known is None or known.last_hb is None or at > known.last_hb:
                self.broker(node, at).on_heartbeat({"ts": at, "broker_epoch": -1, "source": ev["source"]})
        # 2. the controller it names, as a response of its target without a responder
        if ev["target"] != self.last_target:
            self.advance_brokers(ts)
            self.last_target = ev["target"]
        self.controller_reported({"ts": ts, "target": ev["target"], "controller_id": ev["controller_id"],
                                  "controller_epoch": ev.get("controller_epoch"), "responder_node_id": None})

    def on_reading_brokers(self, ev: dict[str, Any]) -> None:
        """Step 4: each broker's age and registration, in the order listed."""
        for node, age, fenced in ev["fetches"]:
            self.broker(node, ev["ts"]).on_reading(ev["ts"], age, fenced)

    def on_round(self, ev: dict[str, Any], exact: frozenset[int] = frozenset()) -> list[int]:
        """A collector's round of the cluster (README "Collectors: rounds, gaps, leaving"): the brokers'
        heartbeat deadlines up to it fall due; after a gap nobody watched, every session restarts at it; a
        whole set of registrations (`registered`) that misses a broker makes it leave. The ids that left."""
        ts = ev["ts"]
        self.advance_brokers(ts)  # observed as it was before the round
        if self.rounds.on_round(ev["source"], ev["target"], ts):
            for broker_id, broker in self.brokers.items():
                if broker_id not in exact:  # README: a reading's age tells what the gap hid
                    broker.restart_session(ts)
        self.advance_brokers(ts)  # with the cluster observed up to `ts`
        self.controller.advance(ts)
        registered = ev.get("registered")
        if registered is None:
            return []
        left = sorted(n for n, broker in self.brokers.items() if not broker.gone and n not in registered)
        for broker_id in left:
            self.brokers[broker_id].leave(ts)  # as at an OFFLINE `no longer registered`
        return left

    def remove(self, ts: int, reason: str) -> None:
        """README "Collectors": a target no longer watched: what fell due before fires, then every open
        alert of the shard resolves with the reason (the shard is forgotten by its owner)."""
        for subject in self.subjects():
            subject.advance(ts)
        self.inc.resolve_all(ts, reason=reason)
