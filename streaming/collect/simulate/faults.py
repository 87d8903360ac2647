"""The 17 fault scripts: how each fault of SPEC section 1 (and issue 30's lost partitions) unfolds on one
simulated cluster.

A script runs at the fault's start and queues what happens next on the cluster's timeline.
`TIMELINE` says how long each script keeps its cluster busy, for the schedule; `injected` is what
the simulator says about a fault it injects (its subject, start, end and the rules it is designed
to raise), which is all it says: the exact alerts are the reference detector's to read.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from streaming.collect.simulate.cluster import ClusterSim, PlannedFault, SimBroker
from streaming.collect.simulate.identities import ClusterIdentity
from streaming.collect.simulate.spec import ERROR_REFUSED, ERROR_TIMEOUT, LAYOUT_INTERVAL_MS, RULES, InjectedFault
from streaming.records.contract import REBOOTSTRAP_REQUIRED

__all__ = ["NEEDS_PARTNER", "READ_AFTER_MS", "SCRIPTS", "TIMELINE", "begin", "injected"]

# cluster.partitions_offline starts this long before a layout reading: both brokers are fenced by
# then (their last heartbeats + the session timeout) and not yet restarted (18 s).
READ_AFTER_MS = 15_000

# Per fault kind: (ms after the fault start by which every designed event has happened and
# every alert it is designed to raise has started, and has ended but for a 300 s window, not
# counting the probe round that observes the end; ms after the start of its last broker-state
# or controller change, or None).
# The cluster stays busy until that change has left the flap windows, so that one fault's
# transitions never add up with the next one's.
TIMELINE: dict[str, tuple[int, int | None]] = {
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
    # The schedule starts it a layout reading's READ_AFTER_MS before one: the next, a layout interval
    # later, shows the partitions back.
    "cluster.partitions_offline": (READ_AFTER_MS + LAYOUT_INTERVAL_MS, 19_500),
}
# Faults that involve a second cluster (an endpoint or bootstrap reaching it, or one of its
# endpoints being advertised): that cluster must be quiet meanwhile.
NEEDS_PARTNER = ("cluster.id_changed", "connection.misrouted", "endpoint.collision")

# Per fault kind: the rules it is designed to raise, its own first, then its side effects: a
# stopped broker whose last answer to clients came a whole heartbeat interval after its last
# heartbeat counts as cut off while serving (rare: the crash usually comes first); a partitioned
# broker's heartbeats stop too; a broker killed out of a stuck shutdown and restarted changed
# state four times in five minutes; a bootstrap name that reaches another cluster's broker is
# broker 1's name too, so its endpoint probe is misrouted; two brokers down together leave the
# partitions only they hold offline, and those of which they hold two of three replicas under
# min.insync.replicas 2 (placement.py), each broker's crash is a broker.heartbeat_lost as above.
_RAISES: dict[str, tuple[str, ...]] = {
    "broker.heartbeat_lost": ("broker.heartbeat_lost", "broker.partitioned"),
    "broker.partitioned": ("broker.partitioned", "broker.heartbeat_lost"),
    "broker.stuck_stopping": ("broker.stuck_stopping", "broker.flapping"),
    "cluster.id_changed": ("cluster.id_changed", "connection.misrouted"),
    "cluster.partitions_offline": ("cluster.partitions_offline", "cluster.under_min_isr", "broker.heartbeat_lost",
                                   "broker.partitioned"),
}
# Issue 44: a broker process that stops (a crash, a hang, a kill, a path to the controller lost) stops
# fetching from the KRaft leader, and a quorum reading 2-2.5 s later shows it (`broker.stalled`: its last
# fetch came to the leader up to 500 ms before it stopped), unless it is back by then: a restart within 3 s
# is read stalled or not as the reading falls.
_STOPS_A_BROKER = ("broker.heartbeat_lost", "broker.fenced", "broker.partitioned", "broker.stuck_stopping",
                   "broker.epoch_regression", "broker.illegal_transition", "connection.misrouted",
                   "endpoint.collision", "cluster.partitions_offline")
# With a single broker the victim is the bootstrap broker too. A misrouted name is then the
# bootstrap's, which reports the other cluster's id (cluster.id_changed). And while the only
# broker is out of the metadata (fenced or restarting), the bootstrap lists no broker, so it
# shares no endpoint with a DR alias that reported the same cluster id in an earlier
# cluster.id_duplicate fault: the rules hold what a target reported until it has been silent for
# rules.state_ttl_ms (a day), and the alias was dropped from monitoring, not forgotten. And its
# partitions have no other replica: a layout read while it is out of the metadata but answering
# (fenced, restarted and not yet caught up) shows every one offline.
_ONE_BROKER_RAISES = {"connection.misrouted": ("cluster.id_changed",)}
_TAKES_THE_ONLY_BROKER_OUT = (
    "broker.heartbeat_lost", "broker.fenced", "broker.partitioned", "broker.stuck_stopping",
    "broker.epoch_regression", "broker.flapping", "broker.illegal_transition", "connection.misrouted",
    "endpoint.collision")
# The faults that hit one broker (`_victim`); the others hit the cluster as a whole.
_ABOUT_A_BROKER = (*_TAKES_THE_ONLY_BROKER_OUT, "cluster.controller_disagreement")

Script = Callable[[ClusterSim, int, PlannedFault], None]


def injected(kind: str, info: ClusterIdentity, brokers: int, partner: ClusterIdentity | None, at: int, *,
             after_a_clone: bool) -> InjectedFault:
    """What the simulator says about a fault of `kind` it starts on `info` at `at`: its subject,
    start and end, and the rules it is designed to raise. `after_a_clone`: the cluster had a
    cluster.id_duplicate fault before."""
    rules = _RAISES.get(kind, (kind,)) + (("broker.stalled",) if kind in _STOPS_A_BROKER else ())
    if brokers == 1:
        rules += _ONE_BROKER_RAISES.get(kind, ())
        if kind in _TAKES_THE_ONLY_BROKER_OUT:
            rules += ("cluster.partitions_offline",)
        if after_a_clone and kind in _TAKES_THE_ONLY_BROKER_OUT:
            rules += ("cluster.id_duplicate",)
    node = _victim_node(brokers) if kind in _ABOUT_A_BROKER else None
    endpoint = {"cluster.id_changed": info.address(1), "connection.misrouted": info.address(_victim_node(brokers)),
                "endpoint.collision": _taken(info, _victim_node(brokers), partner)}.get(kind)
    return InjectedFault(kind, info.cluster_id, info.target, at, at + TIMELINE[kind][0], rules, node, endpoint,
                         partner.target if partner else None)


def begin(sim: ClusterSim, planned: PlannedFault, at: int) -> None:
    """The action that starts `planned` on `sim`."""
    SCRIPTS[planned.kind](sim, at, planned)


def _victim_node(brokers: int) -> int:
    """The broker a broker fault hits: the last one, never the bootstrap broker or the controller
    (node 1) if the cluster has another one, so the cluster stays observable through the fault."""
    return brokers


def _victim(sim: ClusterSim) -> SimBroker:
    return sim.brokers[_victim_node(len(sim.brokers))]


def _taken(info: ClusterIdentity, node: int, partner: ClusterIdentity | None) -> str:
    """The address a misconfigured broker `node` of `info` copies: the partner's broker of the same
    number (or its last), or without a partner its own cluster's broker 1."""
    return partner.address(min(node, len(partner.hosts))) if partner else info.address(1)


def _other_controller(sim: ClusterSim) -> int:
    """Where the controller moves: another broker, or with a single broker a dedicated
    KRaft controller node."""
    usual = sim.info.controller
    return usual % len(sim.brokers) + 1 if len(sim.brokers) > 1 else 3000 + usual


def _heartbeat_lost(sim: ClusterSim, t: int, planned: PlannedFault) -> None:
    _crash(sim, t, planned, _victim(sim))


def _crash(sim: ClusterSim, t: int, planned: PlannedFault, b: SimBroker) -> None:
    # The process crashes (or, every other time, hangs): no heartbeats, no answers. The
    # controller fences it after the session timeout; the pod restarts it 18 s later.
    last = sim.stop(b, ERROR_TIMEOUT if planned.occurrence % 2 else ERROR_REFUSED)
    sim.at(last + RULES.session_timeout_ms + 50, sim.transition(b, "FENCED", "session timeout"))
    sim.at(t + 18_000, partial(sim.register, b=b))
    sim.at(t + 19_500, sim.transition(b, "ONLINE", "caught up"))


def _partitions_offline(sim: ClusterSim, t: int, planned: PlannedFault) -> None:
    # The node of the Kubernetes cluster that runs the last two brokers' pods (no anti-affinity)
    # fails: both crash at once and are restarted 18 s later. Kafka fenced both by the layout
    # reading 15 s in (the schedule's alignment), so it shows the partitions they alone hold offline
    # and those with one replica left in sync under min ISR; the next reading shows them back.
    for node in (len(sim.brokers) - 1, len(sim.brokers)):
        _crash(sim, t, planned, sim.brokers[node])


def _fenced(sim: ClusterSim, t: int, planned: PlannedFault) -> None:
    # A quick restart, but the new process cannot catch up with the metadata log (a slow
    # disk): it heartbeats, answers clients, and stays fenced for 50 s.
    b = _victim(sim)
    sim.stop(b, ERROR_REFUSED)

    def restart(at: int) -> None:
        b.caught_up, b.lag_from = False, sim.offset(at) - 400
        sim.register(at, b)

    sim.at(t + 3000, restart)
    sim.at(t + 3200, sim.transition(b, "FENCED", "registered; not caught up"))

    def caught_up(at: int) -> None:
        b.caught_up = True
        sim.report_state(at, b, "ONLINE", "caught up", previous="FENCED")

    sim.at(t + 53_200, caught_up)


def _partitioned(sim: ClusterSim, t: int, planned: PlannedFault) -> None:
    # The broker loses its path to the controller for 25 s but keeps serving clients (the
    # worked example heartbeat-and-fence).
    b = _victim(sim)
    last = sim.stop(b, None)
    sim.at(last + RULES.session_timeout_ms + 50, sim.transition(b, "FENCED", "session timeout"))

    def heal(at: int) -> None:
        b.chain += 1
        sim.heartbeat_loop(b, b.chain, at)

    sim.at(t + 25_000, heal)
    sim.at(t + 26_000, sim.transition(b, "ONLINE", "caught up"))


def _stuck_stopping(sim: ClusterSim, t: int, planned: PlannedFault) -> None:
    # A controlled shutdown that never completes (partition leadership cannot move); the
    # operator kills the broker after 150 s and it restarts. Those four transitions within
    # five minutes are also a broker.flapping.
    b = _victim(sim)
    b.want_shutdown = True
    sim.report_state(t, b, "STOPPING", "controlled shutdown requested", by_agent=True, previous="ONLINE")

    def kill(at: int) -> None:
        sim.stop(b, ERROR_REFUSED)
        b.want_shutdown = False
        sim.report_state(at, b, "OFFLINE", "killed after shutdown timeout", by_agent=True, previous="STOPPING")

    sim.at(t + 150_000, kill)
    sim.at(t + 154_000, partial(sim.register, b=b))
    sim.at(t + 154_200, sim.transition(b, "FENCED", "registered"))
    sim.at(t + 155_500, sim.transition(b, "ONLINE", "caught up"))


def _epoch_regression(sim: ClusterSim, t: int, planned: PlannedFault) -> None:
    # The process freezes (a stalled VM); a new one starts elsewhere and registers with a
    # new epoch. The old one wakes up 8 s later and sends three heartbeats with its old epoch
    # before it learns it is stale and exits.
    b = _victim(sim)
    sim.stop(b, ERROR_TIMEOUT)
    old_epoch, stale_offset = b.epoch, sim.offset(t)
    sim.at(t + 4000, partial(sim.register, b=b))
    sim.at(t + 4200, sim.transition(b, "FENCED", "re-registered with a new incarnation"))
    sim.at(t + 5500, sim.transition(b, "ONLINE", "caught up"))
    for when in (t + 12_000, t + 14_000, t + 16_000):
        sim.at(when, lambda at: sim.send_heartbeat(
            at, b, epoch=old_epoch, metadata_offset=stale_offset, fenced=False, want_fence=False,
            want_shutdown=False, caught_up=False))


def _flapping(sim: ClusterSim, t: int, planned: PlannedFault) -> None:
    # A failing log directory: the broker asks to be fenced, recovers, and fails again.
    b = _victim(sim)

    def fence(at: int) -> None:
        b.want_fence = True
        sim.report_state(at, b, "FENCED", "broker requested fencing: log directory failure", previous="ONLINE")

    def unfence(at: int) -> None:
        b.want_fence = False
        sim.report_state(at, b, "ONLINE", "log directory recovered", previous="FENCED")

    for offset, action in ((0, fence), (10_000, unfence), (25_000, fence), (35_000, unfence)):
        sim.at(t + offset, action)


def _illegal_transition(sim: ClusterSim, t: int, planned: PlannedFault) -> None:
    # The process exits and restarts; its agent reports OFFLINE, then ONLINE straight away
    # (the FENCED report was lost), which the lifecycle does not allow.
    b = _victim(sim)
    sim.stop(b, ERROR_REFUSED)
    sim.at(t + 100, sim.transition(b, "OFFLINE", "process exited", by_agent=True))
    sim.at(t + 3000, partial(sim.register, b=b))
    sim.at(t + 4500, sim.transition(b, "ONLINE", "caught up", by_agent=True))


def _set_later(sim: ClusterSim, when: int, name: str, value: Any) -> None:
    """Set the cluster's attribute `name` to `value` at `when`."""
    sim.at(when, lambda at: setattr(sim, name, value))


def _no_controller(sim: ClusterSim, t: int, planned: PlannedFault) -> None:
    # The KRaft quorum loses its leader for 25 s; the same controller is elected again.
    sim.controller = None
    _set_later(sim, t + 25_000, "controller", sim.info.controller)


def _controller_flapping(sim: ClusterSim, t: int, planned: PlannedFault) -> None:
    # The controller moves every 20 s and comes back: four moves, the third fires.
    usual, other = sim.info.controller, _other_controller(sim)
    sim.controller = other
    for offset, controller in ((20_000, usual), (40_000, other), (60_000, usual)):
        _set_later(sim, t + offset, "controller", controller)


def _controller_disagreement(sim: ClusterSim, t: int, planned: PlannedFault) -> None:
    # One broker's metadata cache is stuck: it names a controller the others do not, for 45 s.
    b = _victim(sim)
    b.view = _other_controller(sim)
    sim.at(t + 45_000, lambda at: setattr(b, "view", None))


def _id_changed(sim: ClusterSim, t: int, planned: PlannedFault) -> None:
    # The bootstrap DNS name points at another cluster's broker for 20 s. That name is
    # broker 1's, so its endpoint probe reaches the other cluster too: a connection.misrouted.
    # The prober keeps probing the brokers it knew.
    assert planned.partner is not None
    address = sim.info.address(1)
    sim.redirects[address] = (planned.partner, None)
    sim.at(t + 20_000, lambda at: sim.redirects.pop(address, None))


def _id_duplicate(sim: ClusterSim, t: int, planned: PlannedFault) -> None:
    # A DR test brings up a clone of this cluster (copied storage, so the same cluster id)
    # behind the "-dr" alias, which the prober watches. After 40 s the alias is switched
    # back to this cluster (the endpoint sets overlap again: resolved), and 10 s later it is
    # dropped from monitoring.
    sim.alias = "clone"
    _set_later(sim, t + 40_000, "alias", "primary")
    _set_later(sim, t + 50_000, "alias", None)


def _id_invalid(sim: ClusterSim, t: int, planned: PlannedFault) -> None:
    # After a botched metadata restore the cluster has not written its ClusterIdRecord yet:
    # every answer carries no cluster id for 20 s.
    sim.no_id = True
    _set_later(sim, t + 20_000, "no_id", False)


def _unreachable(sim: ClusterSim, t: int, planned: PlannedFault) -> None:
    # A firewall change cuts the prober off the cluster for 45 s; the brokers stay healthy.
    sim.unreachable = True
    _set_later(sim, t + 45_000, "unreachable", False)


def _misrouted(sim: ClusterSim, t: int, planned: PlannedFault) -> None:
    # A broker pod is rescheduled; its stale DNS name now reaches a broker of another
    # cluster (KIP-1242) for 20 s. Every other time that broker is new enough to refuse
    # with REBOOTSTRAP_REQUIRED. With a single broker the bootstrap name is the same one,
    # so the bootstrap reports the other cluster's id too: a cluster.id_changed.
    assert planned.partner is not None
    b = _victim(sim)
    sim.stop(b, ERROR_REFUSED)
    error = REBOOTSTRAP_REQUIRED if planned.occurrence % 2 else None

    def rescheduled(at: int) -> None:
        sim.register(at, b)
        sim.redirects[b.address] = (planned.partner, error)

    sim.at(t + 4000, rescheduled)
    sim.at(t + 4200, sim.transition(b, "FENCED", "re-registered"))
    sim.at(t + 5500, sim.transition(b, "ONLINE", "caught up"))
    sim.at(t + 24_000, lambda at: sim.redirects.pop(b.address, None))


def _collision(sim: ClusterSim, t: int, planned: PlannedFault) -> None:
    # The broker restarts with advertised.listeners copied from another broker's config, so
    # it advertises that broker's host:port. It cannot catch up with that config and stays
    # fenced, so metadata never lists it; 17 s later it restarts with the right config.
    b = _victim(sim)
    taken = _taken(sim.info, b.node, planned.partner)
    sim.stop(b, ERROR_REFUSED)

    def misconfigured(at: int) -> None:
        b.caught_up, b.lag_from = False, sim.offset(at) - 50
        sim.register(at, b, (taken,))
        # Fenced at once: a metadata response listing it would advertise its real address
        # and end the collision.
        sim.report_state(at, b, "FENCED", "registered; not caught up", previous=b.state)

    def fixed(at: int) -> None:
        b.caught_up = True
        sim.stop(b, None)
        sim.register(at, b)

    sim.at(t + 3000, misconfigured)
    sim.at(t + 20_000, fixed)
    sim.at(t + 21_500, sim.transition(b, "ONLINE", "caught up"))


SCRIPTS: dict[str, Script] = {
    "broker.heartbeat_lost": _heartbeat_lost,
    "broker.fenced": _fenced,
    "broker.partitioned": _partitioned,
    "broker.stuck_stopping": _stuck_stopping,
    "broker.epoch_regression": _epoch_regression,
    "broker.flapping": _flapping,
    "broker.illegal_transition": _illegal_transition,
    "cluster.no_controller": _no_controller,
    "cluster.controller_flapping": _controller_flapping,
    "cluster.controller_disagreement": _controller_disagreement,
    "cluster.id_changed": _id_changed,
    "cluster.id_duplicate": _id_duplicate,
    "cluster.id_invalid": _id_invalid,
    "cluster.unreachable": _unreachable,
    "connection.misrouted": _misrouted,
    "endpoint.collision": _collision,
    "cluster.partitions_offline": _partitions_offline,
}
