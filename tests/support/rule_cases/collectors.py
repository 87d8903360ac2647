"""Scenarios of a collector's rounds (issue 41; streaming/detect/README.md, "Collectors: rounds, gaps,
leaving"; streaming/detect/observers.py): a collector's silence is blindness, not its brokers'; a target it
drops resolves its alerts. Rounds every 5 s, as the probe's default."""

from __future__ import annotations

from support.rule_events import (
    B1,
    CONTROLLER_WINDOW,
    FENCED,
    FENCED_GRACE,
    HB_LOST,
    NO_CONTROLLER,
    SESSION,
    SILENT,
    UNREACHABLE,
    UNREACHABLE_RULE,
    C,
    Cases,
    D,
    F,
    R,
    case_adder,
    ctl,
    every,
    fail,
    hb,
    later,
    merged,
    past,
    rnd,
    state,
    t,
    watching,
)

CASES: Cases = {}
case = case_adder(CASES)


def heartbeats(start: float, stop: float, broker: int = 1) -> list:
    return [hb(t(s), broker) for s in every(start, stop, 2)]


def rounds(start: float, stop: float, source: str = "probe") -> list:
    return [rnd(s, source) for s in every(start, stop, 5)]


def doc_rounds(start: float, stop: float) -> list:
    """The collector's rounds of another target, "doc" (cluster D)."""
    return [rnd(s, target="doc", cluster=D) for s in every(start, stop, 5)]


# broker.heartbeat_lost, watched in rounds -------------------------------------------------------
case(HB_LOST, "rounds: a silent broker fires at its deadline, shown by the first round after it",
     merged(heartbeats(0, 4), rounds(0, 15), [later(past(t(15)))]),
     [F(HB_LOST, B1, t(4) + SESSION)], "fires", "rounds")
case(HB_LOST, "rounds: not before a round after the deadline, whatever the watermark",
     merged(heartbeats(0, 4), rounds(0, 10), [later(past(t(30)))]),
     [F(SILENT, "probe", t(10) + SESSION)], "quiet", "rounds")
case(HB_LOST, "rounds: a collector that stops pages no broker while nobody watches",
     merged(heartbeats(0, 4), rounds(0, 5), [later(past(t(60)))]),
     [F(SILENT, "probe", t(5) + SESSION)], "quiet", "rounds")
case(HB_LOST, "rounds: after a gap longer than a session the sessions restart at the round",
     merged(heartbeats(0, 4), rounds(0, 5), rounds(25, 40), heartbeats(26, 40), [later(past(t(40)))]),
     [F(SILENT, "probe", t(5) + SESSION), R(SILENT, "probe", t(5) + SESSION, t(25))], "quiet", "rounds")
case(HB_LOST, "rounds: a broker still silent after a gap fires one session after the round that ends it",
     merged(heartbeats(0, 4), rounds(0, 5), rounds(25, 40), [later(past(t(40)))]),
     [F(SILENT, "probe", t(5) + SESSION), R(SILENT, "probe", t(5) + SESSION, t(25)),
      F(HB_LOST, B1, t(25) + SESSION)], "fires", "rounds")
case(HB_LOST, "rounds: a round less than a session after the last one ends no gap",
     merged(heartbeats(0, 4), [rnd(0), rnd(5), rnd(13), rnd(18)], [later(past(t(18)))]),
     [F(HB_LOST, B1, t(4) + SESSION)], "fires", "rounds")
case(HB_LOST, "rounds: two collectors (HA): one frozen, the other's rounds show the broker silent",
     merged(heartbeats(0, 4), rounds(0, 5, "probe"), rounds(0, 20, "probe-b"), [later(past(t(20)))]),
     [F(HB_LOST, B1, t(4) + SESSION), F(SILENT, "probe", t(5) + SESSION)], "fires", "rounds")
case(HB_LOST, "rounds: a broker missing from a whole set of registrations leaves: its alert resolves",
     merged(heartbeats(0, 4), heartbeats(0, 30, broker=2), rounds(0, 15), [rnd(20, registered=[2])],
            [later(past(t(20)))]),
     [F(HB_LOST, B1, t(4) + SESSION), R(HB_LOST, B1, t(4) + SESSION, t(20))], "resolves", "rounds")
case(HB_LOST, "rounds: a whole set of registrations that lists the broker changes nothing",
     merged(heartbeats(0, 4), heartbeats(0, 30, broker=2), rounds(0, 15), [rnd(20, registered=[1, 2])],
            [later(past(t(20)))]),
     [F(HB_LOST, B1, t(4) + SESSION)], "fires", "rounds")
case(HB_LOST, "leaving: a target its collector no longer watches resolves its cluster's alerts",
     merged(heartbeats(0, 4), rounds(0, 15), [watching(20, ["other"]), later(past(t(40)))]),
     [F(HB_LOST, B1, t(4) + SESSION), R(HB_LOST, B1, t(4) + SESSION, t(20))], "resolves", "leaving")
case(HB_LOST, "leaving: a collector that still lists the target changes nothing",
     merged(heartbeats(0, 4), rounds(0, 40), [watching(20, ["pay", "other"]), later(past(t(40)))]),
     [F(HB_LOST, B1, t(4) + SESSION)], "fires", "leaving")
case(HB_LOST, "leaving: another collector's list says nothing of this one's targets",
     merged(heartbeats(0, 4), rounds(0, 40), [watching(20, ["other"], source="probe-b"), later(past(t(40)))]),
     [F(HB_LOST, B1, t(4) + SESSION)], "fires", "leaving")

# a state still held at its deadline, watched in rounds -------------------------------------------
# Measured (bench/rehearsal.py, "probes frozen 20 s"): a cut-off broker answers "no controller"; when its
# answer was the last before the probe froze, nothing named the controller again until the probe thawed,
# and cluster.no_controller fired for a cluster whose controller never left: at first with no round after
# the deadline, then (with a round needed) at the round the frozen probe ended when thawed, every exchange
# of it timed out.
case(NO_CONTROLLER, "rounds: a collector that stops after a no-controller answer pages nothing while nobody watches",
     merged(rounds(0, 5), [ctl(0, 1), ctl(4, 1), ctl(4.5, -1, responder=2), later(past(t(60)))]),
     [F(SILENT, "probe", t(5) + SESSION)], "quiet", "rounds")
case(NO_CONTROLLER, "rounds: the round that ends the gap names the controller: nothing fires",
     merged(rounds(0, 5), rounds(25, 40), [ctl(4, 1), ctl(4.5, -1, responder=2)],
            [ctl(s - 0.5, 1) for s in every(25, 40, 5)], [later(past(t(40)))]),
     [F(SILENT, "probe", t(5) + SESSION), R(SILENT, "probe", t(5) + SESSION, t(25))], "quiet", "rounds")
case(NO_CONTROLLER, "rounds: a round that ends the gap with every exchange failed shows nothing: nothing fires",
     merged(rounds(0, 5), [ctl(4, 1), ctl(4.5, -1, responder=2), fail(24.9), rnd(25), ctl(26, 1)],
            rounds(30, 40), [later(past(t(40)))]),
     [F(SILENT, "probe", t(5) + SESSION), R(SILENT, "probe", t(5) + SESSION, t(25))], "quiet", "rounds")
case(NO_CONTROLLER, "rounds: no controller fires at its deadline, shown by the first report after it",
     merged(rounds(0, 25), [ctl(0, 1), *[ctl(s - 0.5, -1) for s in every(5, 25, 5)], later(past(t(25)))]),
     [F(NO_CONTROLLER, C, t(4.5) + CONTROLLER_WINDOW)], "fires", "rounds")
case(FENCED, "rounds: a fence whose end nobody watched pages nothing",
     merged(rounds(0, 10), [state(t(8), 1, "FENCED", "ONLINE"), later(past(t(8) + FENCED_GRACE))]),
     [F(SILENT, "probe", t(10) + SESSION)], "quiet", "rounds")
case(FENCED, "rounds: fenced fires at its deadline, shown by the first round after it",
     merged(rounds(0, 45), [state(t(8), 1, "FENCED", "ONLINE"), later(past(t(45)))]),
     [F(FENCED, B1, t(8) + FENCED_GRACE)], "fires", "rounds")

# collector.silent ---------------------------------------------------------------------------------
case(SILENT, "fires a session after the last round of a collector that stopped",
     merged(rounds(0, 10), [later(past(t(10) + SESSION))]),
     [F(SILENT, "probe", t(10) + SESSION)], "fires")
case(SILENT, "a round within a session raises nothing",
     merged(rounds(0, 30), [later(past(t(30)))]),
     [], "quiet")
case(SILENT, "resolves at the round that brings the collector back",
     merged(rounds(0, 10), rounds(30, 35), [later(past(t(35)))]),
     [F(SILENT, "probe", t(10) + SESSION), R(SILENT, "probe", t(10) + SESSION, t(30))], "resolves")
case(SILENT, "resolves when the collector no longer watches the target it missed",
     merged(rounds(0, 10), [watching(30, ["other"]), later(past(t(35)))]),
     [F(SILENT, "probe", t(10) + SESSION), R(SILENT, "probe", t(10) + SESSION, t(30))], "resolves")

case(SILENT, "one alert per collector: a cluster silent after it fired keeps it open",
     merged(rounds(0, 10), rounds(30, 60), doc_rounds(3, 13), [later(past(t(60)))]),
     [F(SILENT, "probe", t(10) + SESSION)], "fires")
case(SILENT, "one alert per collector: it resolves when the last silent cluster is back",
     merged(rounds(0, 10), rounds(30, 60), doc_rounds(3, 13), doc_rounds(43, 60), [later(past(t(60)))]),
     [F(SILENT, "probe", t(10) + SESSION), R(SILENT, "probe", t(10) + SESSION, t(43))], "resolves")
case(SILENT, "two clusters silent at one moment: one alert",
     merged(rounds(0, 10), doc_rounds(0, 10), [later(past(t(40)))]),
     [F(SILENT, "probe", t(10) + SESSION)], "fires")
case(SILENT, "one of two silent targets dropped: the other keeps the alert open",
     merged(rounds(0, 10), doc_rounds(0, 10), [watching(30, ["doc"]), later(past(t(40)))]),
     [F(SILENT, "probe", t(10) + SESSION)], "fires")

# cluster.unreachable: a target's shard leaves too -------------------------------------------------
case(UNREACHABLE_RULE, "leaving: a target its collector no longer watches resolves its alert",
     merged([fail(s) for s in every(0, 40, 5)], [watching(45, ["other"], source="test"), later(past(t(45)))]),
     [("firing", UNREACHABLE_RULE, "pay", t(0) + UNREACHABLE, None),
      ("resolved", UNREACHABLE_RULE, "pay", t(0) + UNREACHABLE, t(45))], "resolves", "leaving")
