"""The detection state's TTL (streaming/detect/forgetting.py): what has been quiet for longer than
`state_ttl_ms` is forgotten, unless an alert about it is open; the same alerts whatever the
micro-batches, and with the engines pickled between them (the runs of support.rule_events)."""

from __future__ import annotations

from support.rule_events import (
    B1,
    COLLISION,
    EPOCH,
    HB_LOST,
    ID_CHANGED,
    ID_DUPLICATE,
    C,
    D,
    F,
    R,
    bk,
    book_with,
    boot,
    enumerate_positions,
    hb,
    later,
    lines,
    same_lines,
    t,
)

from streaming.detect import ShardEngine

TTL_S = 700  # longer than every default window (the longest: forget_after_ms, 600 s)
BOOK = book_with(state_ttl_ms=TTL_S * 1000)


def filler(*seconds: float):
    """Bootstraps of an unrelated target: they move the watermark on."""
    return [later(t(s)) for s in seconds]


def test_a_target_quiet_for_longer_than_the_ttl_pins_the_id_it_reports_next():
    quiet_too_long = [boot(0, "pay", C), boot(TTL_S + 1, "pay", D)]
    assert lines(quiet_too_long, BOOK) == []
    quiet_within = [boot(0, "pay", C), boot(TTL_S, "pay", D)]  # exactly the TTL is not longer than it
    assert lines(quiet_within, BOOK) == [F(ID_CHANGED, "pay", t(TTL_S))]


def test_an_open_alert_keeps_its_subject_however_long_it_is_quiet():
    # Broker 1 goes quiet: heartbeat_lost fires and stays open, so the broker's highest epoch is
    # still known when a stale process of it comes back long after the TTL.
    events = [hb(t(0), 1, epoch=5), hb(t(3 * TTL_S), 1, epoch=3)]
    same_lines(lines(events, BOOK), [F(HB_LOST, B1, t(9)), R(HB_LOST, B1, t(9), t(3 * TTL_S)),
                                     F(EPOCH, B1, t(3 * TTL_S))])


def test_a_quiet_shard_with_nothing_open_is_forgotten_once_the_watermark_passes_the_ttl():
    engine = ShardEngine("target:pay")
    engine.process(enumerate_positions([boot(0, "pay", C)]), -(2**62), BOOK)
    assert engine.next_deadline(BOOK) == t(TTL_S)  # the bucket's timer wakes it to be dropped
    assert not engine.forgotten(t(TTL_S), BOOK)
    assert engine.forgotten(t(TTL_S) + 1, BOOK)

    open_alert = ShardEngine("cluster:" + C)
    open_alert.process(enumerate_positions([hb(t(0), 1)]), -(2**62), BOOK)
    open_alert.advance(t(10), BOOK)  # heartbeat_lost fires at 9 s and stays open
    assert open_alert.incidents.open
    assert open_alert.next_deadline(BOOK) is None
    assert not open_alert.forgotten(t(10 * TTL_S), BOOK)


def test_a_cluster_quiet_for_longer_than_the_ttl_no_longer_advertises():
    # C advertised x1 once, at 0: a TTL later its advertisement has ended.
    c_then_d = [boot(0, "pay", C, "b1:9092", [bk(1, "x1:9092")]), *filler(300, 600),
                boot(TTL_S + 1, "doc", D, "d1:9092", [bk(5, "x1:9092")])]
    assert lines(c_then_d, BOOK) == []
    within = [boot(0, "pay", C, "b1:9092", [bk(1, "x1:9092")]), *filler(300, 600),
              boot(TTL_S, "doc", D, "d1:9092", [bk(5, "x1:9092")])]
    assert lines(within, BOOK) == [F(COLLISION, "x1:9092", t(TTL_S))]


def test_an_open_collision_resolves_when_a_pair_is_not_heard_of_for_the_ttl():
    # C advertised x1 once, at 0: its advertisement stands until 0 + TTL, then the collision ends.
    events = [boot(0, "pay", C, "b1:9092", [bk(1, "x1:9092")]), boot(5, "doc", D, "d1:9092", [bk(5, "x1:9092")]),
              *filler(*range(300, 3 * TTL_S, 300)),
              boot(3 * TTL_S, "doc", D, "d1:9092", [bk(5, "x2:9092")])]
    assert lines(events, BOOK) == [F(COLLISION, "x1:9092", t(5)), R(COLLISION, "x1:9092", t(5), t(TTL_S))]
    # Both go on advertising: the collision stays open past the TTL, until D moves.
    advertising = sorted([boot(s, "pay", C, "b1:9092", [bk(1, "x1:9092")]) for s in range(0, 3 * TTL_S, 30)]
                         + [boot(s + 5, "doc", D, "d1:9092", [bk(5, "x1:9092")]) for s in range(0, 3 * TTL_S, 30)]
                         + [boot(3 * TTL_S, "doc", D, "d1:9092", [bk(5, "x2:9092")])], key=lambda e: e.ts)
    assert lines(advertising, BOOK) == [F(COLLISION, "x1:9092", t(5)), R(COLLISION, "x1:9092", t(5), t(3 * TTL_S))]


def test_a_lease_runs_from_its_last_renewal():
    # Renewed at 0 and at 50 s (more than TTL/16 = 43.75 s later), not at 60 s: C's advertisement
    # stands until 50 s + TTL, although C last advertised at 60 s.
    c_adverts = [boot(s, "pay", C, "b1:9092", [bk(1, "x1:9092")]) for s in (0, 50, 60)]
    assert lines([*c_adverts, boot(TTL_S + 50, "doc", D, "d1:9092", [bk(5, "x1:9092")])], BOOK) == [
        F(COLLISION, "x1:9092", t(TTL_S + 50))]
    assert lines([*c_adverts, boot(TTL_S + 51, "doc", D, "d1:9092", [bk(5, "x1:9092")])], BOOK) == []


def test_a_target_quiet_for_longer_than_the_ttl_no_longer_holds_its_cluster_id():
    a_then_b = [boot(0, "a", C, "a1:9092", [bk(1, "a1:9092")]), *filler(300, 600),
                boot(TTL_S + 1, "b", C, "b1:9092", [bk(1, "b1:9092")])]
    assert lines(a_then_b, BOOK) == []
    within = [boot(0, "a", C, "a1:9092", [bk(1, "a1:9092")]), *filler(300, 600),
              boot(TTL_S, "b", C, "b1:9092", [bk(1, "b1:9092")])]
    # (Broker 1 of C moving from a1 to b1 is one pair re-advertising, not a collision.)
    assert lines(within, BOOK) == [F(ID_DUPLICATE, C, t(TTL_S))]
