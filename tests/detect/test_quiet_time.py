"""A broker's quiet time (the earliest deadline it found, kept so that most events need not look again)
never hides a deadline: a broker that keeps it through a collector's round that moves `observed_until` on
and through a quorum reading that shows it unfenced again (issue 45) raises the same alerts, at the same
moments, as one that looks at its deadlines before every event."""

from __future__ import annotations

import random

import pytest

from streaming.config import RuleSettings
from streaming.detect.alerts import Emitter, Incidents
from streaming.detect.brokers import BrokerTracker
from streaming.records.contract import BrokerHeartbeat, BrokerState, MetadataResponse

CLUSTER = "PayPayPayPayPayPayPayA"


class _Broker:
    """A tracker with its incidents and the lines of the alerts it emitted."""

    def __init__(self) -> None:
        self.tracker = BrokerTracker(CLUSTER, 2)
        self.incidents = Incidents()
        self.out = Emitter()

    def lines(self) -> list[tuple[str, str, int, int | None]]:
        return [(a.rule, a.status, a.starts_at, a.ends_at) for a in self.out.alerts]


def _steps(rng: random.Random, count: int) -> list[tuple[str, tuple[object, ...]]]:
    """Calls an engine makes of a broker: heartbeats (some late, some fenced, some of a lower epoch), fetches a
    reading shows, states, answers, readings, rounds that move `observed_until` on (or end it), controllers lost
    and found."""
    steps: list[tuple[str, tuple[object, ...]]] = []
    now, epoch = 1_000_000, 10
    for _ in range(count):
        now += rng.choice([50, 200, 1000, 2000, 2000, 2000, 4000, 9000, 20_000])
        kind = rng.choices(["heartbeat", "fetch", "advance", "round", "state", "answer", "reading", "controller"],
                           [10, 4, 6, 5, 1, 2, 3, 1])[0]
        if kind == "heartbeat":
            epoch += rng.random() < 0.05
            steps.append(("heartbeat", (now - rng.choice([0, 0, 0, 700, 5000]), epoch - (rng.random() < 0.05),
                                        rng.choice([None, None, None, False, True]))))
        elif kind == "fetch":
            steps.append(("fetch", (now - rng.choice([0, 300, 1500, 5000]),)))
        elif kind == "advance":
            steps.append(("advance", (now,)))
        elif kind == "round":
            # Mostly the round's own time; now and then an older round's (a slower collector's), or none left.
            until = rng.choices([now, now - 3000, None], [8, 1, 1])[0]
            steps.append(("round", (now, until)))
        elif kind == "state":
            steps.append(("state", (now, rng.choice(["ONLINE", "FENCED", "STOPPING", "OFFLINE"]))))
        elif kind == "answer":
            steps.append(("answer", (now,)))
        elif kind == "reading":
            steps.append(("reading", (now, rng.choice([100, 400, 3000, 7000, None]), rng.choice([None, False, True]))))
        else:
            steps.append(("controller", (now, rng.choice(["hold", "release", "new"]))))
    return steps


def _apply(broker: _Broker, step: tuple[str, tuple[object, ...]], rules: RuleSettings) -> None:
    tracker, inc, out = broker.tracker, broker.incidents, broker.out
    kind, args = step
    if kind == "heartbeat":
        ts, epoch, fenced = args
        tracker.advance_to(ts, rules, inc, out)
        tracker.on_heartbeat(BrokerHeartbeat(ts, "agent", CLUSTER, 2, "heartbeat", epoch, None, fenced, None, None),
                             rules, inc, out)
    elif kind == "fetch":
        (ts,) = args
        tracker.advance_to(ts, rules, inc, out)
        tracker.on_fetch(ts, rules, inc, out)
    elif kind == "advance":
        tracker.advance_to(args[0], rules, inc, out)
    elif kind == "round":  # as the engine takes a round (collector_events.py): advanced before and after it
        ts, until = args
        tracker.advance_to(ts, rules, inc, out)
        tracker.observe_until(until)
        tracker.advance_to(ts, rules, inc, out)
    elif kind == "state":
        ts, state = args
        tracker.advance_to(ts, rules, inc, out)
        tracker.on_state(BrokerState(ts, "controller", CLUSTER, 2, state, None, None, None), rules, inc, out)
    elif kind == "answer":
        (ts,) = args
        tracker.advance_to(ts, rules, inc, out)
        tracker.on_answer(MetadataResponse(ts, "probe", CLUSTER, "pay", "b2:9092", None, 2, 1, None, 1, None),
                          rules, inc, out)
    elif kind == "reading":
        ts, age, fenced = args
        tracker.advance_to(ts, rules, inc, out)
        tracker.on_reading(ts, age, fenced, rules, inc, out)
    else:
        ts, change = args
        tracker.advance_to(ts, rules, inc, out)
        if change == "hold":
            tracker.hold_session(ts)
        elif change == "release":
            tracker.release_session()
        else:
            tracker.release_session()
            tracker.on_new_controller(ts, inc)


@pytest.mark.parametrize("late_ratio", [None, 0.5])
@pytest.mark.parametrize("seed", range(40))
def test_a_broker_that_keeps_its_quiet_time_raises_what_one_that_looks_every_time_raises(seed, late_ratio):
    rules = RuleSettings(heartbeat_late_ratio=late_ratio)
    kept, looking = _Broker(), _Broker()
    steps = _steps(random.Random(seed), 400)
    for step in steps:
        _apply(kept, step, rules)
        looking.tracker._quiet_until = None  # forget the quiet time before every call
        _apply(looking, step, rules)
    last = max(args[0] for _, args in steps)
    for broker in (kept, looking):
        broker.tracker.advance_to(last + 600_000, rules, broker.incidents, broker.out)
    assert looking.lines(), "the steps raise alerts"
    assert kept.lines() == looking.lines()
