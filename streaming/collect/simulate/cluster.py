"""One simulated cluster: its broker agents, its controller and its prober, as a queue of timed
actions. The fault scripts (faults.py) drive it through the public methods below."""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from streaming.collect.simulate.identities import DOMAIN, PORT, ClusterIdentity
from streaming.collect.simulate.placement import PREFERRED_ELECTION_MS, Placement
from streaming.collect.simulate.spec import ERROR_TIMEOUT, LAYOUT_INTERVAL_MS, FleetSpec
from streaming.records.contract import (
    Broker,
    BrokerHeartbeat,
    BrokerState,
    CollectorRound,
    Endpoint,
    Expected,
    MetadataResponse,
    PartitionLayout,
    QuorumReading,
    event_to_dict,
    topic_of,
)

__all__ = ["HB_JITTER_MS", "ClusterSim", "PlannedFault", "SimBroker", "TimedAction", "layout_reading_after"]

HB_JITTER_MS = 200
_PROBE_STEP_MS = 5  # responses of one probe round, a few ms apart
_FIRST_ROUND_MS = 2500  # the first probe round finds every broker ONLINE
_TIMEOUT_LATENCY_MS = 3000  # the prober's request timeout
_LISTED_STATES = ("ONLINE", "STOPPING")  # the controller omits fenced brokers from metadata
_LAYOUT_AFTER_MS = 3  # a layout reading starts once the round's bootstrap answered
# The brokers' own min.insync.replicas, which the probe reads as the default: Kafka's.
_BROKER_MIN_ISR = 1
# A running broker fetches from the KRaft leader at least every 500 ms: a reading sees its last fetch
# up to this old (real Kafka 4.4 on loopback: 30-330 ms).
_FETCH_AGE_MAX_MS = 400
# The leader holds a fetch with nothing new for up to the fetch's wait (500 ms): a broker that stops
# last fetched up to this long before it stopped, and a reading ages its fetch from then (the probe takes
# a held fetch's arrival, LastCaughtUpTimestamp, not its answer; real Kafka 4.4: the arrival 89-471 ms
# before a SIGSTOP, streaming/collect/probe/quorum.py).
_HELD_FETCH_MAX_MS = 500


def _first_round(spec: FleetSpec, index: int) -> int:
    return spec.start_ms + _FIRST_ROUND_MS + index * spec.probe_interval_ms // spec.clusters


def layout_reading_after(spec: FleetSpec, index: int, when: int) -> int:
    """The time of cluster `index`'s first partition layout reading at or after `when`: the probe
    reads one at its first round and then every `LAYOUT_INTERVAL_MS` (with the default 5 s rounds,
    the real probe's cadence exactly: it reads when a round finds the last reading that old)."""
    first = _first_round(spec, index) + _LAYOUT_AFTER_MS
    return first + max(0, -(-(when - first) // LAYOUT_INTERVAL_MS)) * LAYOUT_INTERVAL_MS


@dataclass
class SimBroker:
    """One broker of a simulated cluster: its process, its agent and what the controller sees."""

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
    # Its metadata fetches from the KRaft leader: running since `fetching_since`, or stopped at `stopped_at`
    # (the moment its process stopped, or lost its path to the controller), its last fetch come to the
    # leader at `last_fetch_at` (the fetch it held: `_HELD_FETCH_MAX_MS`).
    fetching_since: int = 0
    stopped_at: int | None = None
    last_fetch_at: int = 0

    @property
    def address(self) -> str:
        return f"{self.host}:{PORT}"


@dataclass(frozen=True)
class PlannedFault:
    """A fault the schedule gave this cluster; `partner` is the other cluster it involves."""

    kind: str
    start: int
    occurrence: int  # how many faults of this kind came before: alternates the variants
    partner: ClusterIdentity | None


# (time, sequence number, what to do at that time): the number orders actions due together.
TimedAction = tuple[int, int, Callable[[int], None]]


class ClusterSim:
    """One cluster, its agents and its prober, as a queue of timed actions.

    A fault is an action too: the fleet queues each planned fault's script (faults.py), which
    queues more actions through `at`, `register`, `report_state`, `transition` and `stop`.
    """

    def __init__(self, spec: FleetSpec, index: int, info: ClusterIdentity) -> None:
        self.spec = spec
        self.index = index
        self.info = info
        self.rng = random.Random(f"fleetwatch-sim:{spec.seed}:{index}")
        # The readings' fetch ages draw from their own: the rest of the stream is as without readings.
        self.fetch_rng = random.Random(f"fleetwatch-sim-fetches:{spec.seed}:{index}")
        self.queue: list[TimedAction] = []
        self.seq = 0
        self.now = spec.start_ms  # the time of the action being run
        self.out: list[dict[str, Any]] = []
        self.offset_base = 10_000 + self.rng.randrange(90_000)
        self.controller: int | None = info.controller
        self.unreachable = False
        self.no_id = False
        # host:port -> (the cluster whose broker it reaches now, error it answers with or None)
        self.redirects: dict[str, tuple[ClusterIdentity, str | None]] = {}
        self.alias: str | None = None  # DR alias target: None, "clone" or "primary"
        self.brokers = {
            n: SimBroker(n, info.hosts[n - 1], info.rack(n), f"agent-{info.hosts[n - 1]}")
            for n in range(1, spec.brokers + 1)}
        self.placement = Placement(spec.brokers)
        for b in self.brokers.values():
            self.at(spec.start_ms + (index * 131 + b.node * 97) % 600, partial(self._start_broker, b))
        self.at(_first_round(spec, index), self._probe_round)
        first_layout = layout_reading_after(spec, index, spec.start_ms)
        self.at(first_layout, self._read_layout)
        if spec.quorum_interval_ms:
            self.at(_first_round(spec, index) + spec.quorum_interval_ms, self._read_quorum)
        self.at(spec.start_ms + PREFERRED_ELECTION_MS, self._elect_preferred)

    # -- machinery ---------------------------------------------------------------------------------

    def at(self, when: int, run: Callable[[int], None]) -> None:
        self.seq += 1
        heapq.heappush(self.queue, (when, self.seq, run))

    def run(self, end: int) -> Iterator[tuple[int, int, int, str, dict[str, Any]]]:
        """Events with ts < end, in ts order, keyed for a deterministic merge of clusters."""
        emitted = 0
        while self.queue and self.queue[0][0] < end:
            at, _, action = heapq.heappop(self.queue)
            self.now = at
            action(at)
            for ev in self.out:
                emitted += 1
                yield ev["ts"], self.index, emitted, topic_of(ev["type"]), ev
            self.out.clear()

    def emit(self, event: BrokerState | BrokerHeartbeat, **agent_fields: Any) -> None:
        """Emit an event of this cluster's agents and controller in its wire form (with what an
        agent sends beyond the contract)."""
        ev = event_to_dict(event)
        ev.update(agent_fields)
        self.out.append(ev)

    def offset(self, at: int) -> int:
        """The cluster's metadata log end offset: it grows by a few records a second."""
        return self.offset_base + (at - self.spec.start_ms) // 200

    # -- brokers -------------------------------------------------------------------------------------

    def report_state(self, at: int, b: SimBroker, state: str, reason: str, *, by_agent: bool = False,
                     previous: str | None = None) -> None:
        source = b.source if by_agent else f"controller-{self.info.target}"
        b.state = state
        self.placement.apply(frozenset(n for n, other in self.brokers.items() if other.state in _LISTED_STATES))
        self.emit(BrokerState(ts=at, source=source, cluster_id=self.info.cluster_id, broker_id=b.node, state=state,
                              previous_state=previous, broker_epoch=b.epoch, reason=reason))

    def transition(self, b: SimBroker, state: str, reason: str, *, by_agent: bool = False) -> Callable[[int], None]:
        """An action that moves `b` to `state`, naming the state it leaves."""
        return lambda at: self.report_state(at, b, state, reason, by_agent=by_agent, previous=b.state)

    def register(self, at: int, b: SimBroker, endpoints: tuple[str, ...] | None = None) -> None:
        """A (re)started broker process registers with a new epoch and starts heartbeating."""
        b.epoch = self.offset(at) + b.node
        b.probe_error = None
        b.last_hb = at
        b.fetching_since, b.stopped_at = at, None
        advertised = endpoints or (b.address,)
        self.emit(BrokerHeartbeat(
            ts=at, source=b.source, cluster_id=self.info.cluster_id, broker_id=b.node, kind="registration",
            broker_epoch=b.epoch, metadata_offset=self.offset(at) - 1, fenced=None, rack=b.rack,
            endpoints=tuple(Endpoint(e.rsplit(":", 1)[0], int(e.rsplit(":", 1)[1]), "PLAINTEXT", "PLAINTEXT")
                            for e in advertised)))
        b.chain += 1
        self.at(at + self._beat_gap(b), partial(self.heartbeat_loop, b, b.chain))

    def _start_broker(self, b: SimBroker, at: int) -> None:
        self.register(at, b)
        # The agent's first report: it does not know the state before the process started.
        self.at(at + 200, lambda t: self.report_state(t, b, "FENCED", "registered"))
        self.at(at + 1500, self.transition(b, "ONLINE", "caught up"))

    def _beat_gap(self, b: SimBroker) -> int:
        return self.spec.heartbeat_interval_ms + self.rng.randint(-HB_JITTER_MS, HB_JITTER_MS)

    def send_heartbeat(self, at: int, b: SimBroker, *, epoch: int, metadata_offset: int, fenced: bool,
                       want_fence: bool, want_shutdown: bool, caught_up: bool) -> None:
        """A heartbeat of `b`'s process, with the fields KRaft's BrokerHeartbeatRequest carries."""
        self.emit(BrokerHeartbeat(ts=at, source=b.source, cluster_id=self.info.cluster_id, broker_id=b.node,
                                  kind="heartbeat", broker_epoch=epoch, metadata_offset=metadata_offset,
                                  fenced=fenced, rack=b.rack, endpoints=None),
                  want_fence=want_fence, want_shutdown=want_shutdown, caught_up=caught_up)

    def _regular_heartbeat(self, at: int, b: SimBroker) -> None:
        offset = self.offset(at) - self.rng.randrange(3) if b.caught_up else b.lag_from
        b.last_hb = at
        self.send_heartbeat(at, b, epoch=b.epoch, metadata_offset=offset, fenced=b.state == "FENCED",
                            want_fence=b.want_fence, want_shutdown=b.want_shutdown, caught_up=b.caught_up)

    def heartbeat_loop(self, b: SimBroker, chain: int, at: int) -> None:
        if chain != b.chain:
            return
        if b.stopped_at is not None:  # its path to the controller healed
            b.fetching_since, b.stopped_at = at, None
        self._regular_heartbeat(at, b)
        self.at(at + self._beat_gap(b), partial(self.heartbeat_loop, b, chain))

    def stop(self, b: SimBroker, error: str | None) -> int:
        """The process stops heartbeating (and answers probes with `error`, if any); returns its
        last heartbeat."""
        b.chain += 1
        if b.stopped_at is None:
            b.stopped_at = self.now
            b.last_fetch_at = self.now - self.fetch_rng.randint(0, _HELD_FETCH_MAX_MS)
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
        last = at + step * len(self.brokers)
        if self.alias is not None:
            base = at + step * (len(self.brokers) + 1)
            self.at(base, self._alias_bootstrap)
            last = base
            if self.alias == "clone":
                for n in self.brokers:
                    self.at(base + step * n, partial(self._clone_probe, n))
                last = base + step * len(self.brokers)
        if self.spec.quorum_interval_ms:
            # A probe that reads quorums says its rounds too (issue 41): it observes the cluster whatever a
            # round found, and a reading that fails (an election) is no silence of the probe.
            self.at(last + 1, self._round_done)
        self.at(at + self.spec.probe_interval_ms, self._probe_round)

    def _round_done(self, at: int) -> None:
        self.out.append(event_to_dict(CollectorRound(at, f"probe-{self.index % 4 + 1}", self.info.cluster_id,
                                                     self.info.target, None)))

    def _probe_broker(self, node: int, at: int) -> None:
        address = self.info.address(node)
        self._respond(at, self.info.target, address, self.info.expectations[node - 1],
                      *self._reach(address, node, bootstrap=False))

    def _listed(self) -> tuple[Broker, ...]:
        listed = self.info.brokers
        return tuple(listed[b.node - 1] for b in self.brokers.values() if b.state in _LISTED_STATES)

    def _reach(self, address: str, node: int, *, bootstrap: bool
               ) -> tuple[int | None, str | None, int | None, str | None, tuple[Broker, ...] | None]:
        """Who answers a request to `address`: (responder, cluster id, controller, error, brokers)."""
        if self.unreachable:
            return None, None, None, ERROR_TIMEOUT, None
        redirect = self.redirects.get(address)
        if redirect is not None:
            other, error = redirect
            # KIP-1242: a newer broker refuses a request that names another cluster; a bootstrap
            # request names none, so it gets the other cluster's metadata.
            if error is not None and not bootstrap:
                return None, None, None, error, None
            return (None if bootstrap else node), other.cluster_id, other.controller, None, other.brokers
        b = self.brokers[node]
        if b.probe_error is not None:
            return None, None, None, b.probe_error, None
        controller = b.view if b.view is not None else self.controller
        return ((None if bootstrap else node), None if self.no_id else self.info.cluster_id,
                -1 if controller is None else controller, None, self._listed())

    def _respond(self, at: int, target: str, endpoint: str, expected: Expected | None,
                 responder: int | None, cluster_id: str | None, controller: int | None, error: str | None,
                 brokers: tuple[Broker, ...] | None) -> None:
        if error == ERROR_TIMEOUT:
            latency = _TIMEOUT_LATENCY_MS
        elif error is not None:
            latency = self.rng.randint(0, 2)
        else:
            latency = self.rng.randint(1, 15)
        self.out.append(event_to_dict(MetadataResponse(
            ts=at, source=f"probe-{self.index % 4 + 1}", cluster_id=cluster_id, target=target, endpoint=endpoint,
            expected=expected, responder_node_id=responder, controller_id=controller, error=error,
            latency_ms=latency, brokers=brokers)))

    # -- the partition layout (issue 30) ----------------------------------------------------------------

    def _read_layout(self, at: int) -> None:
        """One reading of the partition layout, from broker 1 (where the bootstrap answers). Nothing
        is published when it does not answer as this cluster: cut off, down, or its name reaching
        another cluster's broker (the real probe would read that cluster's layout; the simulation
        leaves it out). An answer without a cluster id (cluster.id_invalid) is still read: the probe
        publishes it under the id the bootstrap last reported."""
        self.at(at + LAYOUT_INTERVAL_MS, self._read_layout)
        if self.unreachable or self.info.address(1) in self.redirects or self.brokers[1].probe_error is not None:
            return
        self.out.append(event_to_dict(PartitionLayout(
            ts=at, source=f"probe-{self.index % 4 + 1}", cluster_id=self.info.cluster_id, target=self.info.target,
            complete=True, default_min_insync=_BROKER_MIN_ISR, topics=self.placement.reading())))

    # -- the quorum reading (issue 44) -------------------------------------------------------------------

    def _read_quorum(self, at: int) -> None:
        """One quorum reading, through broker 1 (where the bootstrap answers), of every broker's fetch age and
        registration. Nothing is published when it cannot be read as this cluster's: cut off, broker 1 down,
        its name reaching another cluster, no cluster id, or no active controller (the real probe's
        DescribeQuorum fails: during an election no reading is published)."""
        self.at(at + self.spec.quorum_interval_ms, self._read_quorum)
        if (self.unreachable or self.no_id or self.controller is None or self.info.address(1) in self.redirects
                or self.brokers[1].probe_error is not None):
            return
        fetches = tuple((b.node, at - b.last_fetch_at if b.stopped_at is not None
                         else min(self.fetch_rng.randint(0, _FETCH_AGE_MAX_MS), at - b.fetching_since),
                         b.state == "FENCED")
                        for b in self.brokers.values())
        self.out.append(event_to_dict(QuorumReading(
            ts=at, source=f"probe-{self.index % 4 + 1}", cluster_id=self.info.cluster_id, target=self.info.target,
            controller_id=self.controller, controller_epoch=None, fetches=fetches)))

    def _elect_preferred(self, at: int) -> None:
        self.placement.elect_preferred()
        self.at(at + PREFERRED_ELECTION_MS, self._elect_preferred)

    # -- the DR alias of cluster.id_duplicate ------------------------------------------------------

    def _alias_target(self) -> str:
        return f"{self.info.target}-dr"

    def _clone_entry(self, node: int) -> Broker:
        return replace(self.info.brokers[node - 1], host=f"{self.info.target}-dr-b{node}.{DOMAIN}")

    def _alias_bootstrap(self, at: int) -> None:
        endpoint = f"{self._alias_target()}.{DOMAIN}:{PORT}"
        if self.alias == "clone":
            clones = tuple(self._clone_entry(n) for n in self.brokers)
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
        self._respond(at, self._alias_target(), f"{entry.host}:{PORT}", self.info.expectations[node - 1], node,
                      self.info.cluster_id, -1 if self.controller is None else self.controller, None,
                      tuple(self._clone_entry(n) for n in self.brokers))
