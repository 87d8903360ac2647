"""A broker that leaves its cluster (streaming/detect/README.md, "Broker rules"): unregistered from
the controller, or replaced at its address by another node id. Its alerts resolve and it is
forgotten; a crash (OFFLINE from an agent, or fenced and silent) resolves nothing. Each case runs
on the engine (every batching, pickled) and on the reference detector of bench/."""

from __future__ import annotations

from support.reference import as_lines, reference_alerts
from support.rule_events import (
    B3,
    COLLISION,
    FENCED,
    HB_LOST,
    C,
    F,
    R,
    bk,
    contract_event,
    enumerate_positions,
    hb,
    later,
    lines,
    past,
    resp,
    run,
    same_lines,
    t,
)

from streaming.config import RuleBook
from streaming.detect import ShardEngine
from streaming.records.contract import UNREGISTERED


def offline(s: float, broker: int, reason: str, previous: str = "FENCED") -> object:
    return contract_event({"type": "broker_state", "ts": t(s), "cluster_id": C, "broker_id": broker,
                           "state": "OFFLINE", "previous_state": previous, "reason": reason})


def fenced(s: float, broker: int) -> object:
    return contract_event({"type": "broker_state", "ts": t(s), "cluster_id": C, "broker_id": broker,
                           "state": "FENCED", "previous_state": "ONLINE", "reason": "DescribeCluster registration"})


def listing(s: float, *brokers: dict) -> object:
    """Broker 1's answer, listing `brokers` (a Metadata list: no fenced flags)."""
    return resp(t(s), "pay", "b1:9092", C, (C, 1), responder=1, brokers=list(brokers))


def both(events: list) -> list:
    """The engine's lines, checked equal to the reference detector's alerts."""
    assert reference_alerts(as_lines(events)) == run(events)
    return lines(events)


def test_an_unregistered_broker_resolves_heartbeat_lost_and_fenced():
    # Broker 3 stops at 0 s; Kafka keeps it registered and fenced until the operator unregisters it at 60 s.
    events = [hb(t(0), 3), fenced(10, 3), offline(60, 3, UNREGISTERED), later(past(t(60)))]
    same_lines(both(events), [F(HB_LOST, B3, t(9)), F(FENCED, B3, t(40)),
                              R(HB_LOST, B3, t(9), t(60)), R(FENCED, B3, t(40), t(60))])


def test_a_crash_resolves_nothing_whatever_the_state_says():
    # An agent's OFFLINE (a crash), or fenced and silent: Kafka keeps the broker registered; it is down.
    crashed = [hb(t(0), 3), offline(1, 3, "process exited", previous="ONLINE"), later(past(t(600)))]
    assert both(crashed) == [F(HB_LOST, B3, t(9))]
    silent = [hb(t(0), 3), fenced(10, 3), later(past(t(600)))]
    assert both(silent) == [F(HB_LOST, B3, t(9)), F(FENCED, B3, t(40))]


def test_an_unregistered_broker_is_forgotten():
    engine = ShardEngine("cluster:" + C)
    book = RuleBook()
    engine.process(enumerate_positions([hb(t(0), 3), hb(t(0), 2)]), -(2**62), book)
    out = engine.process(enumerate_positions([offline(60, 3, UNREGISTERED)]), t(55), book)
    assert [b["state"] for b in out.brokers if b["broker_id"] == 3][-1] == "OFFLINE"
    assert not any(rule == HB_LOST and subject.endswith("/3") for rule, subject in engine.incidents.open)
    engine.process([], t(70), book)
    assert sorted(engine.brokers) == [2]  # broker 2's heartbeat_lost is open: it is kept


def test_a_broker_replaced_at_its_address_by_another_node_id_resolves():
    # Broker 3 stops at 0 s; at 20 s the lists name node 7 at its address, and no longer 3.
    events = [hb(t(0), 3), listing(0, bk(1, "b1:9092"), bk(3, "b3:9092")),
              listing(20, bk(1, "b1:9092"), bk(7, "b3:9092")), later(past(t(20)))]
    same_lines(both(events), [F(HB_LOST, B3, t(9)), R(HB_LOST, B3, t(9), t(20))])


def test_a_broker_replaced_before_its_session_ran_out_raises_nothing():
    events = [hb(t(0), 3), listing(0, bk(1, "b1:9092"), bk(3, "b3:9092")),
              listing(5, bk(1, "b1:9092"), bk(7, "b3:9092")), later(past(t(600)))]
    assert both(events) == []


def test_a_crashed_broker_replaced_by_a_registration_resolves():
    # Known from registrations only: its agent reports the crash (OFFLINE), node 7 registers at its address.
    events = [hb(t(0), 3, kind="registration", endpoints=["b3:9092"]), offline(1, 3, "process exited", "ONLINE"),
              hb(t(30), 7, kind="registration", endpoints=["b3:9092"]), later(past(t(30)))]
    same_lines(both(events), [F(HB_LOST, B3, t(9)), R(HB_LOST, B3, t(9), t(30))])


def test_a_broker_still_registered_at_its_address_is_not_replaced():
    # Real Kafka: the stopped node 3 stays registered (listed fenced) at b3:9092 while node 7 takes
    # it; both advertise it: a collision, and 3 is down until the operator unregisters it.
    def lst(s: float) -> object:
        return listing(s, bk(1, "b1:9092", fenced=False), bk(3, "b3:9092", fenced=True),
                       bk(7, "b3:9092", fenced=False))
    events = [hb(t(0), 3), listing(0, bk(1, "b1:9092", fenced=False), bk(3, "b3:9092", fenced=False)),
              lst(20), lst(50), offline(60, 3, UNREGISTERED), later(past(t(60)))]
    same_lines(both(events), [F(HB_LOST, B3, t(9)), F(COLLISION, "b3:9092", t(20)), F(FENCED, B3, t(50)),
                              R(HB_LOST, B3, t(9), t(60)), R(FENCED, B3, t(50), t(60)),
                              R(COLLISION, "b3:9092", t(20), t(60))])


def test_a_broker_alive_at_its_address_is_not_replaced():
    # A new node registers at a live broker's address (a misconfiguration): the broker heartbeats on,
    # then crashes: heartbeat_lost fires and stays.
    events = [hb(t(0), 3, kind="registration", endpoints=["b3:9092"]),
              hb(t(1), 7, kind="registration", endpoints=["b3:9092"]),
              hb(t(2), 3), hb(t(4), 3), later(past(t(600)))]
    same_lines(both(events), [F(COLLISION, "b3:9092", t(1)), F(HB_LOST, (C, 7), t(10)), F(HB_LOST, B3, t(13))])
