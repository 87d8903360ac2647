"""A deterministic fleet simulator: contract-v1 events with injected faults, and ground truth.

The simulator plays a fleet of Kafka clusters as their collectors would see it: broker agents
report registrations, heartbeats and lifecycle transitions; a prober sends one bootstrap
Metadata request and one request per advertised endpoint to every cluster every few seconds.
Faults (SPEC section 1) are injected one at a time per cluster, and `Simulation.labels()` lists
every alert the rules of streaming/detect/README.md must raise for the stream, with the fault
that caused it.

How the labels are known:
- the timing of broker faults is designed, so their broker alerts are written down by the
  fault itself (e.g. `broker.heartbeat_lost` starts at the last heartbeat + session timeout);
- rules whose outcome depends on how probe rounds fall (controller, identity and routing rules,
  `broker.flapping`) are followed by small trackers that watch the responses and transitions
  the simulator emits, so side effects of a fault are labelled too;
- faults are designed so the few side effects that remain are deliberate (a stuck broker that
  is killed and restarted also flaps) and no fault straddles the end of the stream.

Everything is a pure function of `FleetSpec`: the same spec gives the same bytes.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import heapq
import json
import random
import re
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import orjson

from streaming import topics
from streaming.config import RuleSettings

__all__ = [
    "DEFAULT_START_MS",
    "FAULT_KINDS",
    "FleetSpec",
    "InjectedFault",
    "LiveRun",
    "Simulation",
    "command",
    "configure_parser",
    "parse_faults",
    "produce_live",
    "write_events",
    "write_labels",
]

SCHEMA = "fleetwatch.event/v1"
# A fixed epoch for file output, so that recorded streams are byte-for-byte reproducible.
DEFAULT_START_MS = 1_764_000_000_000

FAULT_KINDS: tuple[str, ...] = (
    "broker.heartbeat_lost",
    "broker.fenced",
    "broker.partitioned",
    "broker.stuck_stopping",
    "broker.epoch_regression",
    "broker.flapping",
    "broker.illegal_transition",
    "cluster.no_controller",
    "cluster.controller_flapping",
    "cluster.controller_disagreement",
    "cluster.id_changed",
    "cluster.id_duplicate",
    "cluster.id_invalid",
    "cluster.unreachable",
    "connection.misrouted",
    "endpoint.collision",
)
_SHORT_NAMES = {kind.split(".", 1)[1]: kind for kind in FAULT_KINDS}

_SEVERITY = {
    "broker.heartbeat_lost": "critical",
    "broker.fenced": "warning",
    "broker.partitioned": "critical",
    "broker.stuck_stopping": "warning",
    "broker.epoch_regression": "critical",
    "broker.flapping": "warning",
    "broker.illegal_transition": "info",
    "cluster.no_controller": "critical",
    "cluster.controller_flapping": "warning",
    "cluster.controller_disagreement": "warning",
    "cluster.id_changed": "critical",
    "cluster.id_duplicate": "critical",
    "cluster.id_invalid": "warning",
    "cluster.unreachable": "critical",
    "connection.misrouted": "critical",
    "endpoint.collision": "critical",
}

# Labels are what the default rule settings produce; a replay with overrides differs.
_RULES = RuleSettings()
_TOPIC_OF = {
    "metadata_response": topics.METADATA,
    "broker_state": topics.BROKER_STATES,
    "broker_heartbeat": topics.HEARTBEATS,
}
_VALID_ID = re.compile(r"^[A-Za-z0-9_-]+$")
_PORT = 9092
_DOMAIN = "fleet.local"
_RACKS = ("a", "b", "c")
_HB_JITTER_MS = 200
_PROBE_STEP_MS = 5  # responses of one probe round, a few ms apart
_FIRST_ROUND_MS = 2500  # the first probe round finds every broker ONLINE
_TIMEOUT_LATENCY_MS = 3000  # the prober's request timeout
_LISTED_STATES = ("ONLINE", "STOPPING")  # the controller omits fenced brokers from metadata
_ERROR_REFUSED = "CONNECTION_REFUSED"
_ERROR_TIMEOUT = "TIMEOUT"
_ERROR_REBOOTSTRAP = "REBOOTSTRAP_REQUIRED"

# Per fault kind: (ms after the fault start by which every designed event has happened and
# every label boundary but a 300 s window has passed, not counting the probe round that
# observes it; ms after the start of its last broker-state or controller change, or None).
# The cluster stays busy until that change has left the flap windows, so that one fault's
# transitions never add up with the next one's.
_TIMELINE: dict[str, tuple[int, int | None]] = {
    "broker.heartbeat_lost": (19_500, 19_500),
    "broker.fenced": (53_200, 53_200),
    "broker.partitioned": (26_000, 26_000),
    "broker.stuck_stopping": (155_500, 155_500),
    "broker.epoch_regression": (76_000, 5_500),
    "broker.flapping": (35_000, 35_000),
    "broker.illegal_transition": (64_500, 4_500),
    "cluster.no_controller": (25_000, None),
    "cluster.controller_flapping": (60_000, 60_000),
    "cluster.controller_disagreement": (45_000, None),
    "cluster.id_changed": (20_000, None),
    "cluster.id_duplicate": (50_000, None),
    "cluster.id_invalid": (20_000, None),
    "cluster.unreachable": (45_000, None),
    "connection.misrouted": (24_000, 5_500),
    "endpoint.collision": (21_500, 21_500),
}
# Faults that involve a second cluster (an endpoint or bootstrap reaching it, or one of its
# endpoints being advertised): that cluster must be quiet meanwhile.
_NEEDS_PARTNER = ("cluster.id_changed", "connection.misrouted", "endpoint.collision")
_PROGRESS_EVERY_S = 3.0
_EARLY_S = 0.01  # how early a real-time event may be sent


def parse_faults(text: str) -> tuple[str, ...]:
    """`all`, `none`, or a comma list of fault kinds (the part after the dot is enough)."""
    value = text.strip()
    if value.lower() == "all":
        return FAULT_KINDS
    if value.lower() == "none":
        return ()
    kinds: list[str] = []
    for raw in value.split(","):
        name = raw.strip()
        kind = name if name in FAULT_KINDS else _SHORT_NAMES.get(name)
        if kind is None:
            raise ValueError(f"unknown fault {name!r}: use all, none, or a comma list of "
                             f"{', '.join(FAULT_KINDS)} (the part after the dot is enough)")
        if kind not in kinds:
            kinds.append(kind)
    return tuple(kinds)


@dataclass(frozen=True)
class FleetSpec:
    """What to simulate. Times are epoch ms (`start_ms`) or ms offsets and durations."""

    clusters: int
    brokers: int
    faults: tuple[str, ...]
    start_ms: int
    duration_ms: int
    seed: int = 0
    fault_every_ms: int = 60_000
    first_fault_ms: int = 30_000
    heartbeat_interval_ms: int = 2000
    probe_interval_ms: int = 5000
    jitter_ms: int = 0

    def __post_init__(self) -> None:
        problems = []
        if self.clusters < 1:
            problems.append("clusters must be at least 1")
        if self.brokers < 1:
            problems.append("brokers must be at least 1")
        if self.duration_ms <= 0:
            problems.append("duration_ms must be positive")
        if self.fault_every_ms <= 0:
            problems.append("fault_every_ms must be positive")
        # The fleet must be up and probed once before the first fault, so identities are pinned.
        if self.first_fault_ms < 10_000:
            problems.append("first_fault_ms must be at least 10000")
        # Restart gaps are designed to stay under the 9 s session timeout with these intervals.
        if not 1000 <= self.heartbeat_interval_ms <= 4000:
            problems.append("heartbeat_interval_ms must be within 1000..4000")
        # Controller views only count responders heard within 15 s: several rounds must fit.
        if not 1000 <= self.probe_interval_ms <= 10_000:
            problems.append("probe_interval_ms must be within 1000..10000")
        if not 0 <= self.jitter_ms < _RULES.allowed_lateness_ms:
            problems.append(f"jitter_ms must be within 0..{_RULES.allowed_lateness_ms - 1} "
                            "(more would make events late)")
        unknown = [f for f in self.faults if f not in FAULT_KINDS]
        if unknown:
            problems.append(f"unknown fault kinds {unknown}")
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def end_ms(self) -> int:
        return self.start_ms + self.duration_ms


@dataclass(frozen=True)
class InjectedFault:
    """One fault of the schedule: on which cluster, when, and the other cluster involved."""

    kind: str
    cluster_id: str
    target: str
    start_ms: int
    partner: str | None = None


@dataclass(frozen=True)
class LiveRun:
    """What `produce_live` did; `start_ms` rebuilds the exact stream it produced."""

    sent: int
    start_ms: int
    stopped: bool
    by_type: dict[str, int] = field(default_factory=dict)


# -- identities ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Info:
    """The static identity of one cluster: id, target name, brokers and usual controller."""

    cluster_id: str
    target: str
    hosts: tuple[str, ...]
    controller: int

    def address(self, node: int) -> str:
        return f"{self.hosts[node - 1]}:{_PORT}"

    def entry(self, node: int) -> dict[str, Any]:
        return {"node_id": node, "host": self.hosts[node - 1], "port": _PORT,
                "rack": _RACKS[(node - 1) % len(_RACKS)]}

    def broker_list(self) -> list[dict[str, Any]]:
        return [self.entry(n) for n in range(1, len(self.hosts) + 1)]


def _cluster_id(seed: int, name: str) -> str:
    """A KIP-78 style id: 16 bytes in URL-safe base64 without padding (22 characters)."""
    digest = hashlib.sha256(f"fleetwatch-sim:{seed}:{name}".encode()).digest()[:16]
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def _make_info(seed: int, target: str, brokers: int) -> _Info:
    hosts = tuple(f"{target}-b{n}.{_DOMAIN}" for n in range(1, brokers + 1))
    return _Info(_cluster_id(seed, target), target, hosts, controller=1)


# -- labels ----------------------------------------------------------------------------------


@dataclass
class _Label:
    rule: str
    cluster_id: str | None
    target: str | None
    broker_id: int | None
    endpoint: str | None
    starts_at: int
    fault: str | None
    ends_at: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "severity": _SEVERITY[self.rule], "cluster_id": self.cluster_id,
                "target": self.target, "broker_id": self.broker_id, "endpoint": self.endpoint,
                "starts_at": self.starts_at, "ends_at": self.ends_at, "fault": self.fault}


Deadline = tuple[int, Callable[[int], None]]


class _Trackers:
    """The rules whose outcome depends on how responses and transitions fall, as the README
    reads them, fed with the events of one simulated cluster in event-time order.

    Only this cluster's own events can open these alerts: a fault that reaches another cluster
    keeps that cluster quiet and gets answers with its usual identity, which change nothing.
    Timers run per subject, like the detectors: a timer fires when a later event of its subject
    proves its time passed, or at the end once the final watermark passed it.
    """

    def __init__(self, cluster_id: str, labels: list[_Label], fault: Callable[[], str | None]) -> None:
        self.cluster_id = cluster_id
        self.labels = labels
        self.fault = fault
        self.open: dict[tuple[str, Any], _Label] = {}
        # broker.flapping: node -> last state, change times
        self.states: dict[int, str] = {}
        self.changes: dict[int, list[int]] = {}
        # controller rules
        self.none_since: int | None = None
        self.views: dict[int, tuple[int, int | None]] = {}
        self.agreed: int | None = None
        self.moves: list[int] = []
        self.disagree_since: int | None = None
        # target rules
        self.pinned: dict[str, str] = {}
        self.reported: set[str] = set()
        self.failing_since: dict[str, int] = {}
        # cluster.id_duplicate: target -> (cluster id, advertised endpoints)
        self.held: dict[str, tuple[str, frozenset[str]]] = {}

    # -- bookkeeping ----------------------------------------------------------------------------

    def _fire(self, rule: str, subject: Any, at: int, *, cluster_id: str | None = None,
              target: str | None = None, broker_id: int | None = None, endpoint: str | None = None) -> None:
        if (rule, subject) not in self.open:
            label = _Label(rule, cluster_id, target, broker_id, endpoint, at, self.fault())
            self.open[(rule, subject)] = label
            self.labels.append(label)

    def _resolve(self, rule: str, subject: Any, at: int) -> None:
        label = self.open.pop((rule, subject), None)
        if label is not None:
            label.ends_at = at

    @staticmethod
    def _run_due(deadlines: Callable[[], list[Deadline]], now: int) -> None:
        """Apply the deadlines due strictly before `now`, in time order."""
        while due := [d for d in deadlines() if d[0] < now]:
            at, action = min(due, key=lambda d: d[0])
            action(at)

    def _broker_deadlines(self, node: int) -> list[Deadline]:
        if ("broker.flapping", node) not in self.open:
            return []
        oldest = self.changes[node][-_RULES.flap_threshold]
        return [(oldest + _RULES.flap_window_ms, partial(self._resolve, "broker.flapping", node))]

    def _cluster_deadlines(self) -> list[Deadline]:
        c = self.cluster_id
        out: list[Deadline] = []
        if self.none_since is not None and ("cluster.no_controller", c) not in self.open:
            out.append((self.none_since + _RULES.controller_window_ms,
                        partial(self._fire, "cluster.no_controller", c, cluster_id=c)))
        if self.disagree_since is not None and ("cluster.controller_disagreement", c) not in self.open:
            out.append((self.disagree_since + _RULES.disagreement_ms,
                        partial(self._fire, "cluster.controller_disagreement", c, cluster_id=c)))
        if ("cluster.controller_flapping", c) in self.open:
            oldest = self.moves[-_RULES.controller_flap_threshold]
            out.append((oldest + _RULES.controller_flap_window_ms,
                        partial(self._resolve, "cluster.controller_flapping", c)))
        return out

    def _target_deadlines(self, target: str) -> list[Deadline]:
        since = self.failing_since.get(target)
        if since is None or ("cluster.unreachable", target) in self.open:
            return []
        return [(since + _RULES.unreachable_ms, partial(self._fire, "cluster.unreachable", target,
                                                        target=target))]

    def touch_broker(self, node: int, at: int) -> None:
        """An event about broker `node` at `at`: its timers due before then have fired."""
        if ("broker.flapping", node) in self.open:
            self._run_due(partial(self._broker_deadlines, node), at)

    def finish(self, watermark: int) -> None:
        """The end of the stream: every timer the final watermark passed has fired."""
        for node in list(self.changes):
            self.touch_broker(node, watermark)
        self._run_due(self._cluster_deadlines, watermark)
        for target in list(self.failing_since):
            self._run_due(partial(self._target_deadlines, target), watermark)

    # -- inputs ----------------------------------------------------------------------------------

    def on_state(self, ev: dict[str, Any]) -> None:
        at, node, state = ev["ts"], ev["broker_id"], ev["state"]
        self.touch_broker(node, at)
        previous = self.states.get(node, ev.get("previous_state"))
        self.states[node] = state
        if previous is None or previous == state:
            return
        window = _RULES.flap_window_ms
        changes = [c for c in self.changes.get(node, []) if at - c < window] + [at]
        self.changes[node] = changes
        if len(changes) >= _RULES.flap_threshold:
            self._fire("broker.flapping", node, at, cluster_id=self.cluster_id, broker_id=node)

    def on_response(self, ev: dict[str, Any]) -> None:
        at = ev["ts"]
        ok = ev["error"] is None
        if ok and ev["cluster_id"] == self.cluster_id:
            for entry in ev["brokers"] or ():
                self.touch_broker(entry["node_id"], at)
            if ev["responder_node_id"] is not None:
                self.touch_broker(ev["responder_node_id"], at)
            self._run_due(self._cluster_deadlines, at)
            self._controller(ev)
        if ev["target"] in self.failing_since:
            self._run_due(partial(self._target_deadlines, ev["target"]), at)
        self._target(ev, ok)
        self._misrouted(ev, ok)
        if ok and ev["expected"] is None and ev["cluster_id"]:
            self._duplicate(ev)

    def _controller(self, ev: dict[str, Any]) -> None:
        at, c = ev["ts"], self.cluster_id
        named_id = ev["controller_id"]
        controller = named_id if named_id is not None and named_id >= 0 else None
        if controller is None:
            if self.none_since is None:
                self.none_since = at
        else:
            self.none_since = None
            self._resolve("cluster.no_controller", c, at)
        responder = ev["responder_node_id"]
        if responder is None:
            return
        previous_view = self.views.get(responder, (at, None))[1]
        self.views[responder] = (at, controller if controller is not None else previous_view)
        named = {view for heard, view in self.views.values()
                 if view is not None and at - heard <= _RULES.controller_window_ms}
        if len(named) == 1:
            (agreed,) = named
            self.disagree_since = None
            self._resolve("cluster.controller_disagreement", c, at)
            if self.agreed is not None and agreed != self.agreed:
                window = _RULES.controller_flap_window_ms
                self.moves = [m for m in self.moves if at - m < window] + [at]
                if len(self.moves) >= _RULES.controller_flap_threshold:
                    self._fire("cluster.controller_flapping", c, at, cluster_id=c, target=ev["target"])
            self.agreed = agreed
        elif len(named) > 1 and self.disagree_since is None:
            self.disagree_since = at

    def _target(self, ev: dict[str, Any], ok: bool) -> None:
        at, target, reported = ev["ts"], ev["target"], ev["cluster_id"]
        if ok:
            self.failing_since.pop(target, None)
            self._resolve("cluster.unreachable", target, at)
        else:
            self.failing_since.setdefault(target, at)
        if reported:
            if _VALID_ID.match(reported):
                self.reported.add(target)
                self._resolve("cluster.id_invalid", target, at)
            else:
                self._fire("cluster.id_invalid", target, at, cluster_id=reported, target=target,
                           endpoint=ev["endpoint"])
        elif ok and target in self.reported:
            self._fire("cluster.id_invalid", target, at, target=target, endpoint=ev["endpoint"])
        if ok and ev["expected"] is None and reported:
            pinned = self.pinned.setdefault(target, reported)
            if reported == pinned:
                self._resolve("cluster.id_changed", target, at)
            else:
                self._fire("cluster.id_changed", target, at, cluster_id=reported, target=target,
                           endpoint=ev["endpoint"])

    def _misrouted(self, ev: dict[str, Any], ok: bool) -> None:
        expected = ev["expected"]
        if expected is None:
            return
        at, endpoint = ev["ts"], ev["endpoint"]
        wrong = ev["error"] == _ERROR_REBOOTSTRAP or (ok and (
            (ev["cluster_id"] and ev["cluster_id"] != expected["cluster_id"])
            or (ev["responder_node_id"] is not None and ev["responder_node_id"] != expected["node_id"])))
        if wrong:
            self._fire("connection.misrouted", endpoint, at, cluster_id=ev["cluster_id"],
                       target=ev["target"], endpoint=endpoint)
        elif ok:
            self._resolve("connection.misrouted", endpoint, at)

    def _duplicate(self, ev: dict[str, Any]) -> None:
        at, target, reported = ev["ts"], ev["target"], ev["cluster_id"]
        endpoints = frozenset(f"{b['host']}:{b['port']}" for b in ev["brokers"] or ())
        previous = self.held.get(target)
        self.held[target] = (reported, endpoints)
        for cluster_id in sorted({reported} | ({previous[0]} if previous else set())):
            sets = [eps for cid, eps in self.held.values() if cid == cluster_id]
            if any(not (a & b) for i, a in enumerate(sets) for b in sets[i + 1:]):
                self._fire("cluster.id_duplicate", cluster_id, at, cluster_id=cluster_id)
            else:
                self._resolve("cluster.id_duplicate", cluster_id, at)


# -- one simulated cluster --------------------------------------------------------------------


@dataclass
class _Broker:
    node: int
    host: str
    rack: str
    source: str
    epoch: int = 0
    state: str = "OFFLINE"  # as the controller sees it, and the broker_state events report it
    probe_error: str | None = None  # None: the process answers clients
    chain: int = 0  # the running heartbeat loop; bumping it stops the loop
    last_hb: int = 0
    caught_up: bool = True
    lag_from: int = 0  # the metadata offset a broker that is not caught up is stuck at
    want_fence: bool = False
    want_shutdown: bool = False
    view: int | None = None  # a controller this broker names instead of the cluster's
    answered_at: int | None = None  # its last successful answer to the prober

    @property
    def address(self) -> str:
        return f"{self.host}:{_PORT}"


@dataclass(frozen=True)
class _Planned:
    kind: str
    start: int
    occurrence: int  # how many faults of this kind came before: alternates the variants
    partner: _Info | None


# (time, sequence number, what to do at that time): the number orders actions due together.
_Action = tuple[int, int, Callable[[int], None]]


class _ClusterSim:
    """One cluster, its agents and its prober, as a queue of timed actions."""

    def __init__(self, spec: FleetSpec, index: int, info: _Info, plan: list[_Planned]) -> None:
        self.spec = spec
        self.index = index
        self.info = info
        self.rng = random.Random(f"fleetwatch-sim:{spec.seed}:{index}")
        self.queue: list[_Action] = []
        self.seq = 0
        self.out: list[dict[str, Any]] = []
        self.offset_base = 10_000 + self.rng.randrange(90_000)
        self.controller: int | None = info.controller
        self.unreachable = False
        self.no_id = False
        # host:port -> (the cluster whose broker it reaches now, error it answers with or None)
        self.redirects: dict[str, tuple[_Info, str | None]] = {}
        self.alias: str | None = None  # DR alias target: None, "clone" or "primary"
        self.fault: str | None = None
        self.labels: list[_Label] = []
        self.trackers = _Trackers(info.cluster_id, self.labels, lambda: self.fault)
        self.brokers = {
            n: _Broker(n, info.hosts[n - 1], _RACKS[(n - 1) % len(_RACKS)], f"agent-{info.hosts[n - 1]}")
            for n in range(1, spec.brokers + 1)}
        for b in self.brokers.values():
            self.at(spec.start_ms + (index * 131 + b.node * 97) % 600, partial(self._start_broker, b))
        self.at(spec.start_ms + _FIRST_ROUND_MS + index * spec.probe_interval_ms // spec.clusters,
                self._probe_round)
        for planned in plan:
            self.at(planned.start, partial(self._begin, planned))

    # -- machinery ---------------------------------------------------------------------------------

    def at(self, when: int, run: Callable[[int], None]) -> None:
        self.seq += 1
        heapq.heappush(self.queue, (when, self.seq, run))

    def run(self, end: int) -> Iterator[tuple[int, int, int, str, dict[str, Any]]]:
        """Events with ts < end, in ts order, keyed for a deterministic merge of clusters."""
        emitted = 0
        while self.queue and self.queue[0][0] < end:
            at, _, action = heapq.heappop(self.queue)
            action(at)
            for ev in self.out:
                emitted += 1
                yield ev["ts"], self.index, emitted, _TOPIC_OF[ev["type"]], ev
            self.out.clear()

    def finish(self, watermark: int) -> list[dict[str, Any]]:
        self.trackers.finish(watermark)
        return [label.as_dict() for label in self.labels]

    def _event(self, event_type: str, at: int, source: str, **fields: Any) -> None:
        """Emit an event of this cluster's agents and controller, and show it to the trackers."""
        ev = {"schema": SCHEMA, "type": event_type, "ts": at, "source": source,
              "cluster_id": self.info.cluster_id, **fields}
        self.out.append(ev)
        if event_type == "broker_state":
            self.trackers.on_state(ev)
        else:
            self.trackers.touch_broker(ev["broker_id"], at)

    def _offset(self, at: int) -> int:
        """The cluster's metadata log end offset: it grows by a few records a second."""
        return self.offset_base + (at - self.spec.start_ms) // 200

    def _label(self, rule: str, at: int, *, broker: _Broker | None = None, endpoint: str | None = None,
               ends_at: int | None = None) -> _Label:
        """A label whose times the fault's design decides (the trackers find the others)."""
        label = _Label(rule, self.info.cluster_id, None, broker.node if broker else None, endpoint, at,
                       self.fault, ends_at)
        self.labels.append(label)
        return label

    # -- brokers -------------------------------------------------------------------------------------

    def _state(self, at: int, b: _Broker, state: str, reason: str, *, by_agent: bool = False,
               previous: str | None = None) -> None:
        fields: dict[str, Any] = {"broker_id": b.node, "state": state}
        if previous is not None:
            fields["previous_state"] = previous
        fields |= {"broker_epoch": b.epoch, "reason": reason}
        source = b.source if by_agent else f"controller-{self.info.target}"
        b.state = state
        self._event("broker_state", at, source, **fields)

    def _transition(self, b: _Broker, state: str, reason: str, *, by_agent: bool = False) -> Callable[[int], None]:
        """An action that moves `b` to `state`, naming the state it leaves."""
        return lambda at: self._state(at, b, state, reason, by_agent=by_agent, previous=b.state)

    def _register(self, at: int, b: _Broker, endpoints: tuple[str, ...] | None = None) -> None:
        """A (re)started broker process registers with a new epoch and starts heartbeating."""
        b.epoch = self._offset(at) + b.node
        b.probe_error = None
        b.last_hb = at
        advertised = endpoints or (b.address,)
        self._event("broker_heartbeat", at, b.source, broker_id=b.node, kind="registration",
                    broker_epoch=b.epoch, metadata_offset=self._offset(at) - 1, rack=b.rack,
                    endpoints=[{"listener": "PLAINTEXT", "host": e.rsplit(":", 1)[0],
                                "port": int(e.rsplit(":", 1)[1]), "security_protocol": "PLAINTEXT"}
                               for e in advertised])
        b.chain += 1
        self.at(at + self._beat_gap(b), partial(self._heartbeat_loop, b, b.chain))

    def _start_broker(self, b: _Broker, at: int) -> None:
        self._register(at, b)
        # The agent's first report: it does not know the state before the process started.
        self.at(at + 200, lambda t: self._state(t, b, "FENCED", "registered"))
        self.at(at + 1500, self._transition(b, "ONLINE", "caught up"))

    def _beat_gap(self, b: _Broker) -> int:
        return self.spec.heartbeat_interval_ms + self.rng.randint(-_HB_JITTER_MS, _HB_JITTER_MS)

    def _heartbeat(self, at: int, b: _Broker) -> None:
        offset = self._offset(at) - self.rng.randrange(3) if b.caught_up else b.lag_from
        b.last_hb = at
        self._event("broker_heartbeat", at, b.source, broker_id=b.node, kind="heartbeat", broker_epoch=b.epoch,
                    metadata_offset=offset, want_fence=b.want_fence, want_shutdown=b.want_shutdown,
                    fenced=b.state == "FENCED", caught_up=b.caught_up, rack=b.rack)

    def _heartbeat_loop(self, b: _Broker, chain: int, at: int) -> None:
        if chain != b.chain:
            return
        self._heartbeat(at, b)
        self.at(at + self._beat_gap(b), partial(self._heartbeat_loop, b, chain))

    def _stop(self, b: _Broker, error: str | None) -> int:
        """The process stops heartbeating (and answers probes with `error`, if any); returns its
        last heartbeat."""
        b.chain += 1
        if error is not None:
            b.probe_error = error
        return b.last_hb

    # -- the prober ------------------------------------------------------------------------------------

    def _probe_round(self, at: int) -> None:
        info = self.info
        self._respond(at, info.target, info.address(1), None, *self._reach(info.address(1), 1, bootstrap=True))
        step = _PROBE_STEP_MS
        for n in self.brokers:
            self.at(at + step * n, partial(self._probe_broker, n))
        if self.alias is not None:
            base = at + step * (len(self.brokers) + 1)
            self.at(base, self._alias_bootstrap)
            if self.alias == "clone":
                for n in self.brokers:
                    self.at(base + step * n, partial(self._clone_probe, n))
        self.at(at + self.spec.probe_interval_ms, self._probe_round)

    def _probe_broker(self, node: int, at: int) -> None:
        address = self.info.address(node)
        self._respond(at, self.info.target, address, {"cluster_id": self.info.cluster_id, "node_id": node},
                      *self._reach(address, node, bootstrap=False))

    def _listed(self) -> list[dict[str, Any]]:
        return [self.info.entry(b.node) for b in self.brokers.values() if b.state in _LISTED_STATES]

    def _reach(self, address: str, node: int, *, bootstrap: bool
               ) -> tuple[int | None, str | None, int | None, str | None, list[dict[str, Any]] | None]:
        """Who answers a request to `address`: (responder, cluster id, controller, error, brokers)."""
        if self.unreachable:
            return None, None, None, _ERROR_TIMEOUT, None
        redirect = self.redirects.get(address)
        if redirect is not None:
            other, error = redirect
            # KIP-1242: a newer broker refuses a request that names another cluster; a bootstrap
            # request names none, so it gets the other cluster's metadata.
            if error is not None and not bootstrap:
                return None, None, None, error, None
            return (None if bootstrap else node), other.cluster_id, other.controller, None, other.broker_list()
        b = self.brokers[node]
        if b.probe_error is not None:
            return None, None, None, b.probe_error, None
        controller = b.view if b.view is not None else self.controller
        return ((None if bootstrap else node), None if self.no_id else self.info.cluster_id,
                -1 if controller is None else controller, None, self._listed())

    def _respond(self, at: int, target: str, endpoint: str, expected: dict[str, Any] | None,
                 responder: int | None, cluster_id: str | None, controller: int | None, error: str | None,
                 brokers: list[dict[str, Any]] | None) -> None:
        if error == _ERROR_TIMEOUT:
            latency = _TIMEOUT_LATENCY_MS
        elif error is not None:
            latency = self.rng.randint(0, 2)
        else:
            latency = self.rng.randint(1, 15)
        ev = {"schema": SCHEMA, "type": "metadata_response", "ts": at,
              "source": f"probe-{self.index % 4 + 1}", "cluster_id": cluster_id, "target": target,
              "endpoint": endpoint, "expected": expected, "responder_node_id": responder,
              "controller_id": controller, "error": error, "latency_ms": latency, "brokers": brokers}
        self.out.append(ev)
        if error is None and responder is not None and cluster_id == self.info.cluster_id:
            self.brokers[responder].answered_at = at
        self.trackers.on_response(ev)

    # -- the DR alias of cluster.id_duplicate ------------------------------------------------------

    def _alias_target(self) -> str:
        return f"{self.info.target}-dr"

    def _clone_entry(self, node: int) -> dict[str, Any]:
        return self.info.entry(node) | {"host": f"{self.info.target}-dr-b{node}.{_DOMAIN}"}

    def _alias_bootstrap(self, at: int) -> None:
        endpoint = f"{self._alias_target()}.{_DOMAIN}:{_PORT}"
        if self.alias == "clone":
            clones = [self._clone_entry(n) for n in self.brokers]
            self._respond(at, self._alias_target(), endpoint, None, None, self.info.cluster_id,
                          -1 if self.controller is None else self.controller, None, clones)
        elif self.alias == "primary":
            self._respond(at, self._alias_target(), endpoint, None,
                          *self._reach(self.info.address(1), 1, bootstrap=True))

    def _clone_probe(self, node: int, at: int) -> None:
        if self.alias != "clone":
            return
        entry = self._clone_entry(node)
        # The clone was made from this cluster's storage: same id, same node ids, same controller.
        self._respond(at, self._alias_target(), f"{entry['host']}:{_PORT}",
                      {"cluster_id": self.info.cluster_id, "node_id": node}, node, self.info.cluster_id,
                      -1 if self.controller is None else self.controller, None,
                      [self._clone_entry(n) for n in self.brokers])

    # -- faults -----------------------------------------------------------------------------------------

    def _victim(self) -> _Broker:
        """The broker a broker fault hits: never the bootstrap broker or the controller if the
        cluster has another one, so the cluster stays observable through the fault."""
        return self.brokers[len(self.brokers)]

    def _other_controller(self) -> int:
        """Where the controller moves: another broker, or with a single broker a dedicated
        KRaft controller node."""
        usual = self.info.controller
        return usual % len(self.brokers) + 1 if len(self.brokers) > 1 else 3000 + usual

    def _begin(self, planned: _Planned, at: int) -> None:
        self.fault = planned.kind
        _SCRIPTS[planned.kind](self, at, planned)

    def _heartbeat_lost(self, t: int, planned: _Planned) -> None:
        # The process crashes (or, every other time, hangs): no heartbeats, no answers. The
        # controller fences it after the session timeout; the pod restarts it 18 s later.
        b = self._victim()
        last = self._stop(b, _ERROR_TIMEOUT if planned.occurrence % 2 else _ERROR_REFUSED)
        lost_at = last + _RULES.session_timeout_ms
        lost = self._label("broker.heartbeat_lost", lost_at, broker=b)
        # Its last answer came before the crash, so at most a heartbeat interval (plus jitter)
        # after its last heartbeat: the rule counts it as serving clients while cut off only when
        # it came a whole interval after that heartbeat (as with real Kafka, a crash is rarely so).
        if (b.answered_at is not None and b.answered_at >= last + _RULES.heartbeat_interval_ms
                and b.answered_at + _RULES.partition_window_ms > lost_at):
            self._label("broker.partitioned", lost_at, broker=b,
                        ends_at=b.answered_at + _RULES.partition_window_ms)
        self.at(last + _RULES.session_timeout_ms + 50, self._transition(b, "FENCED", "session timeout"))

        def restart(at: int) -> None:
            self._register(at, b)
            lost.ends_at = at

        self.at(t + 18_000, restart)
        self.at(t + 19_500, self._transition(b, "ONLINE", "caught up"))

    def _fenced(self, t: int, planned: _Planned) -> None:
        # A quick restart, but the new process cannot catch up with the metadata log (a slow
        # disk): it heartbeats, answers clients, and stays fenced for 50 s.
        b = self._victim()
        self._stop(b, _ERROR_REFUSED)

        def restart(at: int) -> None:
            b.caught_up, b.lag_from = False, self._offset(at) - 400
            self._register(at, b)

        self.at(t + 3000, restart)
        fenced_at = t + 3200
        label = self._label("broker.fenced", fenced_at + _RULES.fenced_grace_ms, broker=b)
        self.at(fenced_at, self._transition(b, "FENCED", "registered; not caught up"))

        def caught_up(at: int) -> None:
            b.caught_up = True
            self._state(at, b, "ONLINE", "caught up", previous="FENCED")
            label.ends_at = at

        self.at(t + 53_200, caught_up)

    def _partitioned(self, t: int, planned: _Planned) -> None:
        # The broker loses its path to the controller for 25 s but keeps serving clients (the
        # worked example heartbeat-and-fence).
        b = self._victim()
        last = self._stop(b, None)
        lost = self._label("broker.heartbeat_lost", last + _RULES.session_timeout_ms, broker=b)
        cut = self._label("broker.partitioned", last + _RULES.session_timeout_ms, broker=b)
        self.at(last + _RULES.session_timeout_ms + 50, self._transition(b, "FENCED", "session timeout"))

        def heal(at: int) -> None:
            b.chain += 1
            self._heartbeat_loop(b, b.chain, at)
            lost.ends_at = cut.ends_at = at

        self.at(t + 25_000, heal)
        self.at(t + 26_000, self._transition(b, "ONLINE", "caught up"))

    def _stuck_stopping(self, t: int, planned: _Planned) -> None:
        # A controlled shutdown that never completes (partition leadership cannot move); the
        # operator kills the broker after 150 s and it restarts. Those four transitions within
        # five minutes are also a broker.flapping, which the trackers label.
        b = self._victim()
        b.want_shutdown = True
        self._state(t, b, "STOPPING", "controlled shutdown requested", by_agent=True, previous="ONLINE")
        stuck = self._label("broker.stuck_stopping", t + _RULES.stopping_timeout_ms, broker=b)

        def kill(at: int) -> None:
            self._stop(b, _ERROR_REFUSED)
            b.want_shutdown = False
            self._state(at, b, "OFFLINE", "killed after shutdown timeout", by_agent=True, previous="STOPPING")
            stuck.ends_at = at

        self.at(t + 150_000, kill)
        self.at(t + 154_000, partial(self._register, b=b))
        self.at(t + 154_200, self._transition(b, "FENCED", "registered"))
        self.at(t + 155_500, self._transition(b, "ONLINE", "caught up"))

    def _epoch_regression(self, t: int, planned: _Planned) -> None:
        # The process freezes (a stalled VM); a new one starts elsewhere and registers with a
        # new epoch. The old one wakes up 8 s later and sends three heartbeats with its old epoch
        # before it learns it is stale and exits.
        b = self._victim()
        self._stop(b, _ERROR_TIMEOUT)
        old_epoch, stale_offset = b.epoch, self._offset(t)
        self.at(t + 4000, partial(self._register, b=b))
        self.at(t + 4200, self._transition(b, "FENCED", "re-registered with a new incarnation"))
        self.at(t + 5500, self._transition(b, "ONLINE", "caught up"))
        zombie = [t + 12_000, t + 14_000, t + 16_000]
        self._label("broker.epoch_regression", zombie[0], broker=b, ends_at=zombie[-1] + _RULES.resolve_after_ms)
        for when in zombie:
            self.at(when, lambda at: self._event(
                "broker_heartbeat", at, b.source, broker_id=b.node, kind="heartbeat", broker_epoch=old_epoch,
                metadata_offset=stale_offset, want_fence=False, want_shutdown=False, fenced=False,
                caught_up=False, rack=b.rack))

    def _flapping(self, t: int, planned: _Planned) -> None:
        # A failing log directory: the broker asks to be fenced, recovers, and fails again.
        b = self._victim()

        def fence(at: int) -> None:
            b.want_fence = True
            self._state(at, b, "FENCED", "broker requested fencing: log directory failure", previous="ONLINE")

        def unfence(at: int) -> None:
            b.want_fence = False
            self._state(at, b, "ONLINE", "log directory recovered", previous="FENCED")

        for offset, action in ((0, fence), (10_000, unfence), (25_000, fence), (35_000, unfence)):
            self.at(t + offset, action)

    def _illegal_transition(self, t: int, planned: _Planned) -> None:
        # The process exits and restarts; its agent reports OFFLINE, then ONLINE straight away
        # (the FENCED report was lost), which the lifecycle does not allow.
        b = self._victim()
        self._stop(b, _ERROR_REFUSED)
        self.at(t + 100, self._transition(b, "OFFLINE", "process exited", by_agent=True))
        self.at(t + 3000, partial(self._register, b=b))
        illegal_at = t + 4500
        self.at(illegal_at, self._transition(b, "ONLINE", "caught up", by_agent=True))
        self._label("broker.illegal_transition", illegal_at, broker=b, ends_at=illegal_at + _RULES.resolve_after_ms)

    def _set(self, when: int, name: str, value: Any) -> None:
        self.at(when, lambda at: setattr(self, name, value))

    def _no_controller(self, t: int, planned: _Planned) -> None:
        # The KRaft quorum loses its leader for 25 s; the same controller is elected again.
        self.controller = None
        self._set(t + 25_000, "controller", self.info.controller)

    def _controller_flapping(self, t: int, planned: _Planned) -> None:
        # The controller moves every 20 s and comes back: four moves, the third fires.
        usual, other = self.info.controller, self._other_controller()
        self.controller = other
        for offset, controller in ((20_000, usual), (40_000, other), (60_000, usual)):
            self._set(t + offset, "controller", controller)

    def _controller_disagreement(self, t: int, planned: _Planned) -> None:
        # One broker's metadata cache is stuck: it names a controller the others do not, for 45 s.
        b = self._victim()
        b.view = self._other_controller()
        self.at(t + 45_000, lambda at: setattr(b, "view", None))

    def _id_changed(self, t: int, planned: _Planned) -> None:
        # The bootstrap DNS name points at another cluster's broker for 20 s. That name is
        # broker 1's, so its endpoint probe reaches the other cluster too: a connection.misrouted
        # that the trackers label. The prober keeps probing the brokers it knew.
        assert planned.partner is not None
        address = self.info.address(1)
        self.redirects[address] = (planned.partner, None)
        self.at(t + 20_000, lambda at: self.redirects.pop(address, None))

    def _id_duplicate(self, t: int, planned: _Planned) -> None:
        # A DR test brings up a clone of this cluster (copied storage, so the same cluster id)
        # behind the "-dr" alias, which the prober watches. After 40 s the alias is switched
        # back to this cluster (the endpoint sets overlap again: resolved), and 10 s later it is
        # dropped from monitoring.
        self.alias = "clone"
        self._set(t + 40_000, "alias", "primary")
        self._set(t + 50_000, "alias", None)

    def _id_invalid(self, t: int, planned: _Planned) -> None:
        # After a botched metadata restore the cluster has not written its ClusterIdRecord yet:
        # every answer carries no cluster id for 20 s.
        self.no_id = True
        self._set(t + 20_000, "no_id", False)

    def _unreachable(self, t: int, planned: _Planned) -> None:
        # A firewall change cuts the prober off the cluster for 45 s; the brokers stay healthy.
        self.unreachable = True
        self._set(t + 45_000, "unreachable", False)

    def _misrouted(self, t: int, planned: _Planned) -> None:
        # A broker pod is rescheduled; its stale DNS name now reaches a broker of another
        # cluster (KIP-1242) for 20 s. Every other time that broker is new enough to refuse
        # with REBOOTSTRAP_REQUIRED. With a single broker the bootstrap name is the same one,
        # so the bootstrap reports the other cluster's id too: the trackers label that.
        assert planned.partner is not None
        b = self._victim()
        self._stop(b, _ERROR_REFUSED)
        error = _ERROR_REBOOTSTRAP if planned.occurrence % 2 else None

        def rescheduled(at: int) -> None:
            self._register(at, b)
            self.redirects[b.address] = (planned.partner, error)

        self.at(t + 4000, rescheduled)
        self.at(t + 4200, self._transition(b, "FENCED", "re-registered"))
        self.at(t + 5500, self._transition(b, "ONLINE", "caught up"))
        self.at(t + 24_000, lambda at: self.redirects.pop(b.address, None))

    def _collision(self, t: int, planned: _Planned) -> None:
        # The broker restarts with advertised.listeners copied from another broker's config, so
        # it advertises that broker's host:port. It cannot catch up with that config and stays
        # fenced, so metadata never lists it; 17 s later it restarts with the right config.
        b = self._victim()
        partner = planned.partner
        taken = partner.address(min(b.node, len(partner.hosts))) if partner else self.info.address(1)
        self._stop(b, _ERROR_REFUSED)
        collision = self._label("endpoint.collision", t + 3000, endpoint=taken)

        def misconfigured(at: int) -> None:
            b.caught_up, b.lag_from = False, self._offset(at) - 50
            self._register(at, b, (taken,))
            # Fenced at once: a metadata response listing it would advertise its real address
            # and end the collision.
            self._state(at, b, "FENCED", "registered; not caught up", previous=b.state)

        def fixed(at: int) -> None:
            b.caught_up = True
            self._stop(b, None)
            self._register(at, b)
            collision.ends_at = at

        self.at(t + 3000, misconfigured)
        self.at(t + 20_000, fixed)
        self.at(t + 21_500, self._transition(b, "ONLINE", "caught up"))


_SCRIPTS: dict[str, Callable[[_ClusterSim, int, _Planned], None]] = {
    "broker.heartbeat_lost": _ClusterSim._heartbeat_lost,
    "broker.fenced": _ClusterSim._fenced,
    "broker.partitioned": _ClusterSim._partitioned,
    "broker.stuck_stopping": _ClusterSim._stuck_stopping,
    "broker.epoch_regression": _ClusterSim._epoch_regression,
    "broker.flapping": _ClusterSim._flapping,
    "broker.illegal_transition": _ClusterSim._illegal_transition,
    "cluster.no_controller": _ClusterSim._no_controller,
    "cluster.controller_flapping": _ClusterSim._controller_flapping,
    "cluster.controller_disagreement": _ClusterSim._controller_disagreement,
    "cluster.id_changed": _ClusterSim._id_changed,
    "cluster.id_duplicate": _ClusterSim._id_duplicate,
    "cluster.id_invalid": _ClusterSim._id_invalid,
    "cluster.unreachable": _ClusterSim._unreachable,
    "connection.misrouted": _ClusterSim._misrouted,
    "endpoint.collision": _ClusterSim._collision,
}


# -- the fleet ----------------------------------------------------------------------------------


def _not_applicable(kind: str, spec: FleetSpec) -> str | None:
    if kind == "cluster.controller_disagreement" and spec.brokers < 2:
        return "needs 2 brokers per cluster"
    if kind == "endpoint.collision" and spec.brokers < 2 and spec.clusters < 2:
        return "needs 2 brokers or 2 clusters"
    return None


class Simulation:
    """A simulated fleet: `events()` is the stream, `labels()` the alerts it must raise.

    `faults` is the schedule of injected faults; `skipped` names the requested kinds that the
    fleet's shape cannot show, with the reason. Targets are named c0000, c0001, ...; the
    stream can be iterated any number of times and is the same each time.
    """

    def __init__(self, spec: FleetSpec) -> None:
        self.spec = spec
        width = max(4, len(str(spec.clusters - 1)))
        self._infos = [_make_info(spec.seed, f"c{i:0{width}d}", spec.brokers) for i in range(spec.clusters)]
        self.skipped: dict[str, str] = {k: r for k in spec.faults if (r := _not_applicable(k, spec))}
        self._plan: dict[int, list[_Planned]] = {i: [] for i in range(spec.clusters)}
        self.faults: tuple[InjectedFault, ...] = self._schedule()
        self._outcome: tuple[int, list[_ClusterSim]] | None = None
        self._labels: list[dict[str, Any]] | None = None

    def _schedule(self) -> tuple[InjectedFault, ...]:
        """Fault n goes to cluster n mod clusters at first_fault + n * fault_every, or as soon as
        that cluster (and the partner it needs) is free; a fault that cannot finish before the
        end of the stream is not started."""
        spec = self.spec
        kinds = [k for k in spec.faults if k not in self.skipped]
        if not kinds:
            return ()
        start, end, probe = spec.start_ms, spec.end_ms, spec.probe_interval_ms
        # Every label boundary must be passed by the final watermark, which trails the last
        # event (at most a heartbeat interval before the end) by the allowed lateness.
        margin = probe + spec.heartbeat_interval_ms + _HB_JITTER_MS + _RULES.allowed_lateness_ms + 1000
        free = [start] * spec.clusters
        seen: Counter[str] = Counter()
        injected = []
        n = 0
        while (slot := start + spec.first_fault_ms + n * spec.fault_every_ms) < end:
            kind = kinds[n % len(kinds)]
            home = n % spec.clusters
            n += 1
            partner_index = (home + 1) % spec.clusters if kind in _NEEDS_PARTNER and spec.clusters > 1 else None
            at = max(slot, free[home], free[partner_index] if partner_index is not None else start)
            core, last_change = _TIMELINE[kind]
            if at + core + margin > end:
                continue
            if partner_index is not None:
                partner = self._infos[partner_index]
                free[partner_index] = max(free[partner_index], at + core + probe)
            elif kind in _NEEDS_PARTNER and kind != "endpoint.collision":
                # A one-cluster fleet: the other cluster is one the prober does not watch.
                partner = _make_info(spec.seed, f"ext-{self._infos[home].target}", spec.brokers)
            else:
                partner = None
            busy = at + core + probe
            if last_change is not None:
                busy = max(busy, at + last_change + probe + max(_RULES.flap_window_ms,
                                                                _RULES.controller_flap_window_ms))
            free[home] = busy
            self._plan[home].append(_Planned(kind, at, seen[kind], partner))
            seen[kind] += 1
            info = self._infos[home]
            injected.append(InjectedFault(kind, info.cluster_id, info.target, at,
                                          partner.target if partner else None))
        return tuple(sorted(injected, key=lambda f: (f.start_ms, f.target)))

    def _emission(self) -> Iterator[tuple[int, str, dict[str, Any]]]:
        """(time the event is sent, topic, event), in sending order."""
        sims = [_ClusterSim(self.spec, i, info, self._plan[i]) for i, info in enumerate(self._infos)]
        merged = heapq.merge(*(sim.run(self.spec.end_ms) for sim in sims))
        last = self.spec.start_ms
        stream = self._jittered(merged) if self.spec.jitter_ms else (
            (ts, topic, ev) for ts, _, _, topic, ev in merged)
        for sent_at, topic, ev in stream:
            last = max(last, ev["ts"])
            yield sent_at, topic, ev
        self._outcome = (last, sims)

    def _jittered(self, merged: Iterator[tuple[int, int, int, str, dict[str, Any]]]
                  ) -> Iterator[tuple[int, str, dict[str, Any]]]:
        """Delay each event by a deterministic 0..jitter_ms-1 ms and send in delayed order.

        An event is held until no event still to come can be due before it; so an event is
        never overtaken by one more than jitter_ms - 1 ms younger: the disorder stays within
        the allowed lateness and no event is late.
        """
        rng = random.Random(f"fleetwatch-sim:{self.spec.seed}:jitter")
        held: list[tuple[int, int, int, int, str, dict[str, Any]]] = []
        for ts, index, seq, topic, ev in merged:
            while held and held[0][0] < ts:
                due, *_, held_topic, held_ev = heapq.heappop(held)
                yield due, held_topic, held_ev
            heapq.heappush(held, (ts + rng.randrange(self.spec.jitter_ms), ts, index, seq, topic, ev))
        while held:
            due, *_, held_topic, held_ev = heapq.heappop(held)
            yield due, held_topic, held_ev

    def events(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """(topic, event) in emission order; nondecreasing ts unless `jitter_ms` is set."""
        for _, topic, ev in self._emission():
            yield topic, ev

    def labels(self) -> list[dict[str, Any]]:
        """Every alert the stream must raise, ordered by start: rule, severity, subject fields,
        starts_at, ends_at (None while still open at the end), and the fault that caused it."""
        if self._labels is None:
            if self._outcome is None:
                for _ in self._emission():
                    pass
            assert self._outcome is not None
            last, sims = self._outcome
            watermark = last - _RULES.allowed_lateness_ms
            found = [label for sim in sims for label in sim.finish(watermark)]
            self._labels = sorted(found, key=lambda d: (
                d["starts_at"], d["rule"], d["cluster_id"] or "", d["target"] or "", d["broker_id"] or 0,
                d["endpoint"] or ""))
        return [dict(label) for label in self._labels]


# -- output --------------------------------------------------------------------------------------


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def write_events(sim: Simulation, path: str | Path, *,
                 progress: Callable[[int, int], None] | None = None) -> Counter[str]:
    """Write the stream as JSONL; returns the count of events by type. `progress` gets
    (events written, event time covered in ms) every few seconds."""
    counts: Counter[str] = Counter()
    written, last_report = 0, time.monotonic()
    with open(path, "w", encoding="utf-8") as fh:
        for _, ev in sim.events():
            fh.write(_dumps(ev) + "\n")
            counts[ev["type"]] += 1
            written += 1
            if progress is not None and written % 10_000 == 0 and time.monotonic() - last_report >= _PROGRESS_EVERY_S:
                last_report = time.monotonic()
                progress(written, ev["ts"] - sim.spec.start_ms)
    return counts


def write_labels(sim: Simulation, path: str | Path) -> int:
    """Write the labels as JSONL; returns how many."""
    labels = sim.labels()
    with open(path, "w", encoding="utf-8") as fh:
        for label in labels:
            fh.write(_dumps(label) + "\n")
    return len(labels)


def produce_live(sim: Simulation, bootstrap_servers: str, *, realtime: bool = True,
                 progress: Callable[[int, int], None] | None = None,
                 stop: threading.Event | None = None) -> LiveRun:
    """Produce the stream to Kafka, each event to its topic, keyed by cluster id.

    In real time the stream is re-anchored to start now and each event is sent when the wall
    clock reaches it (up to `_EARLY_S` early); otherwise events keep their times and go as fast
    as the producer takes them. `stop` interrupts the run; `progress` gets (events sent, event
    time covered in ms) every few seconds. Sent events are flushed before returning.
    """
    from kafka import KafkaProducer  # the file-only paths must not need a broker client
    from kafka.partitioner.default import murmur2

    run = Simulation(replace(sim.spec, start_ms=int(time.time() * 1000))) if realtime else sim
    stop = stop or threading.Event()
    failures: list[BaseException] = []
    # Large, slightly later batches: with the defaults one producer sent ~9k messages/s on
    # 2 cores, short of a 1,000 x 12 fleet's 8.8k/s plus headroom; these gave ~12.6k/s.
    producer = KafkaProducer(bootstrap_servers=bootstrap_servers, client_id="fleetwatch-simulate",
                             acks=1, linger_ms=50, batch_size=256 * 1024)
    by_type: Counter[str] = Counter()
    sent, last_report = 0, time.monotonic()
    # Kafka's keyed partitioning (murmur2, in pure Python here) would run once per message; its
    # answer only depends on (topic, key), so it runs once per cluster and topic.
    partition_of: dict[tuple[str, bytes], int] = {}
    try:
        for due, topic, ev in run._emission():
            # Sleeping for each millisecond's events cost more CPU than producing them: wait only
            # when the next event is more than _EARLY_S ahead of the wall clock.
            if realtime and (wait_s := (due - time.time() * 1000) / 1000) > _EARLY_S and stop.wait(wait_s):
                break
            if stop.is_set():
                break
            key = (ev["cluster_id"] or "").encode()
            partition = partition_of.get((topic, key))
            if partition is None:
                partitions = sorted(producer.partitions_for(topic))
                partition = partitions[(murmur2(key) & 0x7FFFFFFF) % len(partitions)]
                partition_of[(topic, key)] = partition
            future = producer.send(topic, key=key, value=orjson.dumps(ev), partition=partition)
            future.add_errback(failures.append)
            sent += 1
            by_type[ev["type"]] += 1
            if progress is not None and time.monotonic() - last_report >= _PROGRESS_EVERY_S:
                last_report = time.monotonic()
                progress(sent, ev["ts"] - run.spec.start_ms)
        producer.flush()
    finally:
        producer.close()
    if failures:
        raise failures[0]
    return LiveRun(sent=sent, start_ms=run.spec.start_ms, stopped=stop.is_set(), by_type=dict(by_type))


# -- CLI -----------------------------------------------------------------------------------------


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--clusters", type=_positive, default=16, metavar="N",
                   help="clusters in the fleet (default 16: one per fault kind)")
    p.add_argument("--brokers", type=_positive, default=3, metavar="M", help="brokers per cluster (default 3)")
    p.add_argument("--faults", default="all", metavar="LIST",
                   help="fault kinds to inject in turn: all, none, or a comma list such as "
                        "heartbeat_lost,misrouted (default all)")
    p.add_argument("--duration", type=_positive, default=600, metavar="SECONDS",
                   help="event time to simulate (default 600)")
    p.add_argument("--seed", type=int, default=0, help="seed for ids and jitter (default 0)")
    p.add_argument("--fault-every", type=_positive, default=60, metavar="SECONDS",
                   help="seconds between fault starts across the fleet (default 60)")
    p.add_argument("--jitter-ms", type=int, default=0, metavar="MS",
                   help="deliver events out of order by up to this many ms, below the 5000 ms "
                        "allowed lateness (default 0: in order)")
    p.add_argument("--out", metavar="EVENTS.jsonl", help="write the events to this JSONL file")
    p.add_argument("--labels", metavar="LABELS.jsonl",
                   help="write the ground-truth alerts (what replay must produce) to this JSONL file")
    p.add_argument("--bootstrap", metavar="HOST:PORT",
                   help="produce the events live, in real time, to this Kafka bus")
    p.add_argument("--start-ms", type=int, default=DEFAULT_START_MS, metavar="EPOCH_MS",
                   help=f"event time of the start, for file output (default {DEFAULT_START_MS}); "
                        "live runs start now")


def _summary(sim: Simulation, counts: Counter[str], labels: int | None) -> str:
    spec = sim.spec
    by_type = ", ".join(f"{kind} {counts[kind]}" for kind in sorted(counts))
    kinds = Counter(f.kind for f in sim.faults)
    faults = ", ".join(f"{kind} x{count}" if count > 1 else kind for kind, count in kinds.items()) or "none"
    line = (f"simulated {spec.clusters} clusters x {spec.brokers} brokers for {spec.duration_ms // 1000} s: "
            f"{sum(counts.values())} events ({by_type or 'none'}); {len(sim.faults)} faults injected ({faults})")
    if sim.skipped:
        line += "; skipped " + ", ".join(f"{k} ({why})" for k, why in sim.skipped.items())
    if labels is not None:
        line += f"; {labels} labels"
    return line


def _progress_printer(duration_ms: int) -> Callable[[int, int], None]:
    def report(events: int, covered_ms: int) -> None:
        print(f"simulate: {covered_ms // 1000}/{duration_ms // 1000} s of event time, {events} events",
              file=sys.stderr, flush=True)
    return report


def command(args: argparse.Namespace) -> int:
    """`fleetwatch simulate`: write a stream (and its labels) to files, or produce it live."""
    def fail(message: str) -> int:
        print(f"fleetwatch simulate: error: {message}", file=sys.stderr)
        return 2

    if not args.out and not args.bootstrap:
        return fail("give --out EVENTS.jsonl to write a file or --bootstrap HOST:PORT to produce live")
    if args.labels and not args.out and not args.bootstrap:
        return fail("--labels needs --out or --bootstrap")
    try:
        spec = FleetSpec(clusters=args.clusters, brokers=args.brokers, faults=parse_faults(args.faults),
                         start_ms=args.start_ms, duration_ms=args.duration * 1000, seed=args.seed,
                         fault_every_ms=args.fault_every * 1000, jitter_ms=args.jitter_ms)
    except ValueError as exc:
        return fail(str(exc))
    sim = Simulation(spec)
    report = _progress_printer(spec.duration_ms)
    if args.bootstrap:
        from kafka.errors import KafkaError

        stop = threading.Event()
        # Ctrl-C or SIGTERM ends the run cleanly: what was sent is flushed and counted below.
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        try:
            run = produce_live(sim, args.bootstrap, realtime=True, progress=report, stop=stop)
        except KafkaError as exc:
            print(f"fleetwatch simulate: error: cannot produce to {args.bootstrap}: {exc}", file=sys.stderr)
            return 1
        counts = Counter(run.by_type)
        # The stream that went out is the one anchored at the run's start: rebuild it for the
        # files. A stopped run sent only part of it, so there is no file to match it.
        if run.stopped and (args.out or args.labels):
            print("fleetwatch simulate: stopped early; not writing --out/--labels", file=sys.stderr)
            args.out = args.labels = None
        sim = Simulation(replace(spec, start_ms=run.start_ms))
    try:
        if args.out and not args.bootstrap:
            counts = write_events(sim, args.out, progress=report)
        elif args.out:
            write_events(sim, args.out)
        labels = write_labels(sim, args.labels) if args.labels else None
    except OSError as exc:
        print(f"fleetwatch simulate: error: cannot write {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 1
    print(_summary(sim, counts, labels))
    return 130 if args.bootstrap and run.stopped else 0
