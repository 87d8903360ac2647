"""The 16 fault scripts: how each fault of SPEC section 1 unfolds on one simulated cluster.

A script runs at the fault's start and queues what happens next on the cluster's timeline.
Broker faults have a designed timing, so they write their own labels (`_designed_label`); the
outcome of the other rules is left to the trackers (labels.py), which watch what the cluster
emits. `TIMELINE` says how long each script keeps its cluster busy, for the schedule.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from streaming.collect.simulate.cluster import ClusterSim, PlannedFault, SimBroker
from streaming.collect.simulate.labels import Label
from streaming.collect.simulate.spec import ERROR_REFUSED, ERROR_TIMEOUT, RULES
from streaming.contract import REBOOTSTRAP_REQUIRED

__all__ = ["NEEDS_PARTNER", "SCRIPTS", "TIMELINE", "begin"]

# Per fault kind: (ms after the fault start by which every designed event has happened and
# every label boundary but a 300 s window has passed, not counting the probe round that
# observes it; ms after the start of its last broker-state or controller change, or None).
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
}
# Faults that involve a second cluster (an endpoint or bootstrap reaching it, or one of its
# endpoints being advertised): that cluster must be quiet meanwhile.
NEEDS_PARTNER = ("cluster.id_changed", "connection.misrouted", "endpoint.collision")

Script = Callable[[ClusterSim, int, PlannedFault], None]


def begin(sim: ClusterSim, planned: PlannedFault, at: int) -> None:
    """The action that starts `planned` on `sim`."""
    sim.fault = planned.kind
    SCRIPTS[planned.kind](sim, at, planned)


def _designed_label(sim: ClusterSim, rule: str, at: int, *, broker: SimBroker | None = None,
                    endpoint: str | None = None, ends_at: int | None = None) -> Label:
    """A label whose times the fault's design decides (the trackers find the others)."""
    label = Label(rule, sim.info.cluster_id, None, broker.node if broker else None, endpoint, at, sim.fault, ends_at)
    sim.labels.append(label)
    return label


def _victim(sim: ClusterSim) -> SimBroker:
    """The broker a broker fault hits: never the bootstrap broker or the controller if the
    cluster has another one, so the cluster stays observable through the fault."""
    return sim.brokers[len(sim.brokers)]


def _other_controller(sim: ClusterSim) -> int:
    """Where the controller moves: another broker, or with a single broker a dedicated
    KRaft controller node."""
    usual = sim.info.controller
    return usual % len(sim.brokers) + 1 if len(sim.brokers) > 1 else 3000 + usual


def _heartbeat_lost(sim: ClusterSim, t: int, planned: PlannedFault) -> None:
    # The process crashes (or, every other time, hangs): no heartbeats, no answers. The
    # controller fences it after the session timeout; the pod restarts it 18 s later.
    b = _victim(sim)
    last = sim.stop(b, ERROR_TIMEOUT if planned.occurrence % 2 else ERROR_REFUSED)
    lost_at = last + RULES.session_timeout_ms
    lost = _designed_label(sim, "broker.heartbeat_lost", lost_at, broker=b)
    # Its last answer came before the crash, so at most a heartbeat interval (plus jitter)
    # after its last heartbeat: the rule counts it as serving clients while cut off only when
    # it came a whole interval after that heartbeat (as with real Kafka, a crash is rarely so).
    if (b.answered_at is not None and b.answered_at >= last + RULES.heartbeat_interval_ms
            and b.answered_at + RULES.partition_window_ms > lost_at):
        _designed_label(sim, "broker.partitioned", lost_at, broker=b,
                        ends_at=b.answered_at + RULES.partition_window_ms)
    sim.at(last + RULES.session_timeout_ms + 50, sim.transition(b, "FENCED", "session timeout"))

    def restart(at: int) -> None:
        sim.register(at, b)
        lost.ends_at = at

    sim.at(t + 18_000, restart)
    sim.at(t + 19_500, sim.transition(b, "ONLINE", "caught up"))


def _fenced(sim: ClusterSim, t: int, planned: PlannedFault) -> None:
    # A quick restart, but the new process cannot catch up with the metadata log (a slow
    # disk): it heartbeats, answers clients, and stays fenced for 50 s.
    b = _victim(sim)
    sim.stop(b, ERROR_REFUSED)

    def restart(at: int) -> None:
        b.caught_up, b.lag_from = False, sim.offset(at) - 400
        sim.register(at, b)

    sim.at(t + 3000, restart)
    fenced_at = t + 3200
    label = _designed_label(sim, "broker.fenced", fenced_at + RULES.fenced_grace_ms, broker=b)
    sim.at(fenced_at, sim.transition(b, "FENCED", "registered; not caught up"))

    def caught_up(at: int) -> None:
        b.caught_up = True
        sim.report_state(at, b, "ONLINE", "caught up", previous="FENCED")
        label.ends_at = at

    sim.at(t + 53_200, caught_up)


def _partitioned(sim: ClusterSim, t: int, planned: PlannedFault) -> None:
    # The broker loses its path to the controller for 25 s but keeps serving clients (the
    # worked example heartbeat-and-fence).
    b = _victim(sim)
    last = sim.stop(b, None)
    lost = _designed_label(sim, "broker.heartbeat_lost", last + RULES.session_timeout_ms, broker=b)
    cut = _designed_label(sim, "broker.partitioned", last + RULES.session_timeout_ms, broker=b)
    sim.at(last + RULES.session_timeout_ms + 50, sim.transition(b, "FENCED", "session timeout"))

    def heal(at: int) -> None:
        b.chain += 1
        sim.heartbeat_loop(b, b.chain, at)
        lost.ends_at = cut.ends_at = at

    sim.at(t + 25_000, heal)
    sim.at(t + 26_000, sim.transition(b, "ONLINE", "caught up"))


def _stuck_stopping(sim: ClusterSim, t: int, planned: PlannedFault) -> None:
    # A controlled shutdown that never completes (partition leadership cannot move); the
    # operator kills the broker after 150 s and it restarts. Those four transitions within
    # five minutes are also a broker.flapping, which the trackers label.
    b = _victim(sim)
    b.want_shutdown = True
    sim.report_state(t, b, "STOPPING", "controlled shutdown requested", by_agent=True, previous="ONLINE")
    stuck = _designed_label(sim, "broker.stuck_stopping", t + RULES.stopping_timeout_ms, broker=b)

    def kill(at: int) -> None:
        sim.stop(b, ERROR_REFUSED)
        b.want_shutdown = False
        sim.report_state(at, b, "OFFLINE", "killed after shutdown timeout", by_agent=True, previous="STOPPING")
        stuck.ends_at = at

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
    zombie = [t + 12_000, t + 14_000, t + 16_000]
    _designed_label(sim, "broker.epoch_regression", zombie[0], broker=b,
                    ends_at=zombie[-1] + RULES.resolve_after_ms)
    for when in zombie:
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
    illegal_at = t + 4500
    sim.at(illegal_at, sim.transition(b, "ONLINE", "caught up", by_agent=True))
    _designed_label(sim, "broker.illegal_transition", illegal_at, broker=b,
                    ends_at=illegal_at + RULES.resolve_after_ms)


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
    # broker 1's, so its endpoint probe reaches the other cluster too: a connection.misrouted
    # that the trackers label. The prober keeps probing the brokers it knew.
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
    # so the bootstrap reports the other cluster's id too: the trackers label that.
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
    partner = planned.partner
    taken = partner.address(min(b.node, len(partner.hosts))) if partner else sim.info.address(1)
    sim.stop(b, ERROR_REFUSED)
    collision = _designed_label(sim, "endpoint.collision", t + 3000, endpoint=taken)

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
        collision.ends_at = at

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
}
