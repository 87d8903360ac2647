"""Scenarios of quorum readings (issue 44; streaming/detect/README.md, "Before Kafka knows: quorum readings"
and "Broker rules": `broker.stalled`, *stopped*, `broker.heartbeat_lost` from a fence). A reading every
second, as the probe's default; broker 2 fetches at every one (100 ms before it), broker 1 as each case
says. Kafka's defaults: a 9 s session, `stall_after_ms` 2500."""

from __future__ import annotations

from collections.abc import Callable

from support.rule_events import (
    B1,
    FENCED,
    FENCED_GRACE,
    HB_LOST,
    SESSION,
    SILENT,
    STALL_AFTER,
    STALLED,
    Cases,
    F,
    R,
    book_with,
    case_adder,
    every,
    hb,
    later,
    merged,
    past,
    reading,
    t,
)

CASES: Cases = {}
case = case_adder(CASES)

State = tuple[int | None, bool | None]  # broker 1 in one reading: (fetch age in ms or None, fenced or None)


def readings(start: float, stop: float, broker1: Callable[[float], State], controller: int = 3000,
             epoch: int = 1) -> list:
    """A reading every second from `start` to `stop`: broker 1 as `broker1(s)` says, broker 2 fetching."""
    return [reading(s, [(1, *broker1(s)), (2, 100, False)], controller, epoch) for s in every(start, stop, 1)]


def frozen(at: float, fenced_from: float | None = None, back: float | None = None,
           unfenced_from: float | None = None) -> Callable[[float], State]:
    """Broker 1 fetches (100 ms before each reading) up to `at`, then not (its last fetch at `at` - 0.1 s)
    until `back`; its controller reads it fenced from `fenced_from` until `unfenced_from`."""
    def state(s: float) -> State:
        fenced = fenced_from is not None and s >= fenced_from and (unfenced_from is None or s < unfenced_from)
        if s <= at or (back is not None and s >= back):
            return 100, fenced
        return round((s - at + 0.1) * 1000), fenced
    return state


def stopped_at(s: float) -> int:
    """Broker 1's last fetch when it stopped at `s` (`frozen`)."""
    return t(s) - 100


# broker.stalled ----------------------------------------------------------------------------------
case(STALLED, "fires at the reading that shows the fetch stall_after_ms old, dated when it became so",
     readings(0, 8, frozen(4)),
     [F(STALLED, B1, stopped_at(4) + STALL_AFTER)], "fires")
case(STALLED, "a pause just under stall_after_ms raises nothing",
     readings(0, 20, frozen(4, back=6.5)),
     [], "quiet")
case(STALLED, "resolves at the next fresh fetch",
     readings(0, 12, frozen(4, back=9)),
     [F(STALLED, B1, stopped_at(4) + STALL_AFTER), R(STALLED, B1, stopped_at(4) + STALL_AFTER, t(9) - 100)],
     "resolves")
case(STALLED, "escalates: heartbeat_lost at the session's deadline, shown by the first reading after it",
     readings(0, 14, frozen(4)),
     [F(STALLED, B1, stopped_at(4) + STALL_AFTER), F(HB_LOST, B1, stopped_at(4) + SESSION)], "fires")
case(STALLED, "a failover: no reading during the election, unknown ages after it, nothing",
     merged(readings(0, 4, frozen(100)), readings(8, 9, lambda s: (None, False), controller=3001, epoch=2),
            readings(10, 30, frozen(100), controller=3001, epoch=2)),
     [], "quiet")
case(STALLED, "a heartbeat after the fetch became stall_after_ms old (an agent's): no stall",
     merged(readings(0, 8, frozen(4)), [hb(t(s), 1) for s in (5.5, 6.5, 7.5)]),
     [], "quiet")
case(STALLED, "another probe's reading of the stalled fetch, its time 20 ms off, is no fresh fetch",
     merged(readings(0, 9, frozen(4)), [reading(7.01, [(1, 3090, False)], source="probe-b")]),
     [F(STALLED, B1, stopped_at(4) + STALL_AFTER)], "fires")
case(STALLED, "a broker already fenced when it stops fetching is no stall",
     readings(0, 20, frozen(6, fenced_from=3)),
     [], "quiet")
case(STALLED, "off with stall_after_ms 0: the session's deadline alone",
     readings(0, 14, frozen(4)),
     [F(HB_LOST, B1, stopped_at(4) + SESSION)], "quiet", book=book_with(stall_after_ms=0))
case(STALLED, "stall_after_ms per its setting",
     readings(0, 8, frozen(4)),
     [F(STALLED, B1, stopped_at(4) + 1500)], "fires", book=book_with(stall_after_ms=1500))

# broker.heartbeat_lost from the readings -----------------------------------------------------------
case(HB_LOST, "readings: fenced by its controller while stalled: the page comes with that reading",
     readings(0, 10, frozen(4, fenced_from=8)),
     [F(STALLED, B1, stopped_at(4) + STALL_AFTER), F(HB_LOST, B1, t(8))], "fires", "readings")
case(HB_LOST, "readings: after a gap, a fetch a session old pages with the reading that shows it",
     merged(readings(0, 4, frozen(100)), readings(16, 16, frozen(4)), [later(past(t(16)))]),
     [F(HB_LOST, B1, stopped_at(4) + SESSION), F(SILENT, "probe", t(4) + SESSION),
      R(SILENT, "probe", t(4) + SESSION, t(16))], "fires", "readings")
case(HB_LOST, "readings: fenced with no stall seen (readings missing): its deadline stands",
     # Kafka fences it 8 s after its last fetch (a session after its last heartbeat, 1 s before the fetch).
     merged(readings(0, 4, frozen(100)), readings(12, 14, frozen(4, fenced_from=12))),
     [F(HB_LOST, B1, stopped_at(4) + SESSION)], "fires", "readings")
case(HB_LOST, "readings: a controlled shutdown (fenced while fetching, then silent) is no page",
     readings(0, 30, frozen(5.5, fenced_from=5)),
     [], "quiet", "readings")
case(HB_LOST, "readings: a controlled shutdown no reading saw fenced while it fetched (3 s of readings "
     "failed: they went through the broker shutting down) is no page either",
     merged(readings(0, 5, frozen(100)), readings(9, 40, frozen(5.5, fenced_from=5, back=20, unfenced_from=23))),
     [], "quiet", "readings")
case(HB_LOST, "readings: a short session (3 s, heartbeats every 500 ms): Kafka fences a frozen broker before "
     "its fetch is stall_after_ms old, and that is a lost session, not a shutdown: it pages",
     readings(0, 8, frozen(4, fenced_from=6)),
     [F(HB_LOST, B1, stopped_at(4) + 3000)], "fires", "readings",
     book=book_with(session_timeout_ms=3000, heartbeat_interval_ms=500))
case(HB_LOST, "readings: a rolling restart's broker, back and unfenced within the grace, raises nothing",
     readings(0, 40, frozen(5.5, fenced_from=5, back=20, unfenced_from=23)),
     [], "quiet", "readings")
case(HB_LOST, "readings: once seen unfenced again, its session runs: a later freeze warns and pages",
     readings(0, 45, lambda s: frozen(5.5, fenced_from=5, back=20, unfenced_from=23)(s) if s < 30
              else frozen(30)(s)),
     [F(STALLED, B1, stopped_at(30) + STALL_AFTER), F(HB_LOST, B1, stopped_at(30) + SESSION)], "fires", "readings")

# broker.fenced: a stopped broker that does not come back -------------------------------------------
case(FENCED, "readings: a broker stopped and not started again warns after the grace",
     readings(0, 40, frozen(5.5, fenced_from=5)),
     [F(FENCED, B1, t(5) + FENCED_GRACE)], "fires", "readings")

# collector.silent: a reading is a round ----------------------------------------------------------
case(SILENT, "readings keep the collector's observation going; their end is its silence",
     readings(0, 10, frozen(100)) + readings(25, 25, frozen(100)) + [later(past(t(25)))],
     [F(SILENT, "probe", t(10) + SESSION), R(SILENT, "probe", t(10) + SESSION, t(25))], "resolves", "readings")
