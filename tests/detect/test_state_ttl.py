"""The detection state's TTL (streaming/detect/forgetting.py): what has been quiet for longer than
`state_ttl_ms` is forgotten, unless an alert about it is open; the same alerts whatever the
micro-batches, and with the engines pickled between them (the runs of support.rule_events)."""

from __future__ import annotations

import pickle

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

from streaming.detect import ShardEngine, load_engine

TTL_S = 700  # longer than every default window (the longest: forget_after_ms, 600 s)
BOOK = book_with(state_ttl_ms=TTL_S * 1000)


def filler(*seconds: float):
    """Bootstraps of an unrelated target: they keep the fleet-wide shard hearing events."""
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
    # The fleet-wide shard keeps hearing other events; cluster C's advertisement of x1 is forgotten.
    c_then_d = [boot(0, "pay", C, "b1:9092", [bk(1, "x1:9092")]), *filler(300, 600),
                boot(TTL_S + 1, "doc", D, "d1:9092", [bk(5, "x1:9092")])]
    assert lines(c_then_d, BOOK) == []
    within = [boot(0, "pay", C, "b1:9092", [bk(1, "x1:9092")]), *filler(300, 600),
              boot(TTL_S, "doc", D, "d1:9092", [bk(5, "x1:9092")])]
    assert lines(within, BOOK) == [F(COLLISION, "x1:9092", t(TTL_S))]


def test_an_open_collision_is_kept_until_the_overlap_really_ends():
    events = [boot(0, "pay", C, "b1:9092", [bk(1, "x1:9092")]), boot(5, "doc", D, "d1:9092", [bk(5, "x1:9092")]),
              *filler(*range(300, 3 * TTL_S, 300)),
              boot(3 * TTL_S, "doc", D, "d1:9092", [bk(5, "x2:9092")])]
    assert lines(events, BOOK) == [F(COLLISION, "x1:9092", t(5)), R(COLLISION, "x1:9092", t(5), t(3 * TTL_S))]


def test_a_target_quiet_for_longer_than_the_ttl_no_longer_holds_its_cluster_id():
    a_then_b = [boot(0, "a", C, "a1:9092", [bk(1, "a1:9092")]), *filler(300, 600),
                boot(TTL_S + 1, "b", C, "b1:9092", [bk(1, "b1:9092")])]
    assert lines(a_then_b, BOOK) == []
    within = [boot(0, "a", C, "a1:9092", [bk(1, "a1:9092")]), *filler(300, 600),
              boot(TTL_S, "b", C, "b1:9092", [bk(1, "b1:9092")])]
    # (Broker 1 of C moving from a1 to b1 is one pair re-advertising, not a collision.)
    assert lines(within, BOOK) == [F(ID_DUPLICATE, C, t(TTL_S))]


def test_state_written_before_the_ttl_existed_loads_and_counts_from_its_next_event(monkeypatch):
    from streaming.detect.identity import DuplicateRegistry
    from streaming.detect.misroutes import AdvertisementRegistry

    engine = ShardEngine("fleet")
    engine.process(enumerate_positions([boot(0, "pay", C, "b1:9092", [bk(1, "x1:9092")])]), -(2**62), BOOK)
    # Pickle it as the code before the TTL did: without the TTL's fields.
    with monkeypatch.context() as m:
        m.setattr(ShardEngine, "__getstate__",
                  lambda self: {k: v for k, v in self.__dict__.items() if k not in ("last_event_ms", "cluster_id")
                                and not k.startswith("_listing")})
        m.setattr(AdvertisementRegistry, "__getstate__",
                  lambda self: {"adverts": self.adverts, "advertisers": self.advertisers})
        m.setattr(DuplicateRegistry, "__getstate__",
                  lambda self: {"holders": self.holders, "held_by": self.held_by}, raising=False)
        old = pickle.dumps(engine)
    loaded = load_engine(old)
    assert loaded.next_deadline(BOOK) is None  # nothing to forget until it hears something
    out = loaded.process(enumerate_positions([boot(TTL_S, "doc", D, "d1:9092", [bk(5, "x1:9092")])]),
                         -(2**62), BOOK)
    assert [a.rule for a in out.alerts] == [COLLISION]  # C's advertisement was kept
    assert loaded.next_deadline(BOOK) is None  # the collision is open


def test_last_heard_looks_through_its_keys_about_once_per_ttl():
    from streaming.detect.forgetting import LastHeard

    heard: LastHeard[str] = LastHeard()
    heard.heard("a", 0)
    heard.heard("b", 500)
    heard.heard("a", 600)
    assert heard.quiet(701, 700) == []  # looked: nobody quiet, and nobody can be before 500 + 700
    assert heard.look_after == 500
    heard.at["b"] = 100  # were it looked through again before 1,200, it would find "b"
    assert heard.quiet(1000, 700) == []
    assert heard.quiet(1201, 700) == ["b"]
    heard.keep("b", 1201)
    assert heard.quiet(1301, 700) == ["a"]  # "a" (600) is quiet; "b" is looked at a TTL after it was kept
    heard.forget("a")
    assert heard.quiet(1902, 700) == ["b"]
