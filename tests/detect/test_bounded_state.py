"""Nothing grows without bound (issue 27): a cluster's shard holds the brokers and advertisements
that are currently true, and a collision ends when its cluster's own reports stop making it true
(README "Identity and routing rules" and "Forgetting")."""

from __future__ import annotations

import pickle

from support.rule_events import (
    COLLISION,
    C,
    D,
    F,
    R,
    bk,
    book_with,
    boot,
    enumerate_positions,
    every,
    hb,
    lines,
    merged,
    state,
    t,
)

from streaming.detect import ShardEngine, dump_engine, load_engine
from streaming.detect.forgetting import Lease
from streaming.detect.misroutes import Advertisements

TTL_S = 700  # longer than every default window (the longest: forget_after_ms, 600 s)
BOOK = book_with(state_ttl_ms=TTL_S * 1000)


def listing(s: float, nodes: range | list[int], address=lambda n: f"h{n % 1000}:9092"):
    return boot(s, "pay", C, "b1:9092", [bk(n, address(n)) for n in nodes])


def test_a_broker_replaced_by_a_new_node_id_at_its_address_raises_no_collision():
    # The issue's case: node 3 at b3:9092 for 60 s, then node 7 there for 3,000 s. Before, node 3's
    # advertisement stood as long as its cluster advertised anything (each renewal sent it again):
    # a critical collision that never resolved.
    book = book_with(state_ttl_ms=1_000_000)
    at = {1: "b1:9092", 3: "b3:9092", 7: "b3:9092"}.get
    old = [listing(s, [1, 3], at) for s in every(0, 60, 5)]
    new = [listing(s, [1, 7], at) for s in every(65, 3060, 5)]
    assert lines([*old, *new], book) == []


def test_a_collision_seen_only_through_registrations_stays_while_both_brokers_are_registered():
    # Both brokers keep heartbeating for three TTLs: each still is registered with x1, so the
    # collision is true all along (before, it resolved a TTL after the registrations, at 700 s);
    # it ends when D's broker is no longer registered.
    registrations = [hb(t(0), 1, kind="registration", endpoints=["x1:9092"]),
                     hb(t(5), 5, kind="registration", cluster=D, endpoints=["x1:9092"])]
    beats = merged([hb(t(s), 1) for s in every(4, 3 * TTL_S, 4)],
                   [hb(t(s), 5, cluster=D) for s in every(7, 3 * TTL_S, 4)])
    events = [*merged(registrations, beats), state(t(3 * TTL_S + 1), 5, "OFFLINE", "ONLINE", cluster=D)]
    assert lines(events, BOOK) == [F(COLLISION, "x1:9092", t(5)), R(COLLISION, "x1:9092", t(5), t(3 * TTL_S + 1))]


def test_a_registered_broker_gone_quiet_stops_advertising_a_ttl_after_it_was_last_heard():
    # D's broker 5 registered at x1 and heartbeated until 100 s; C's broker 1 goes on. D's
    # advertisement lapses at 100 s + TTL (its lease was renewed by its heartbeats, not only by
    # its registration), and then the collision resolves.
    events = merged([hb(t(0), 1, kind="registration", endpoints=["x1:9092"])],
                    [hb(t(5), 5, kind="registration", cluster=D, endpoints=["x1:9092"])],
                    [hb(t(s), 1) for s in every(4, TTL_S + 200, 4)],
                    [hb(t(s), 5, cluster=D) for s in every(9, 100, 4)])
    got = [line for line in lines(events, BOOK) if line[1] == COLLISION]
    # Renewed at the first report more than TTL/16 (43.75 s) after the last renewal: at 5 s (the
    # registration), 49 s and 93 s (heartbeats at 9, 13, ..., 97 s).
    assert got == [F(COLLISION, "x1:9092", t(5)), R(COLLISION, "x1:9092", t(5), t(93 + TTL_S))]


def test_a_cluster_shard_keeps_only_the_brokers_its_lists_name_now():
    # The reproduction, smaller: every list names 1,000 new node ids at h0..h999:9092.
    engine = ShardEngine("cluster:" + C)
    churn = [listing(r, range(r * 1000, r * 1000 + 1000)) for r in range(10)]
    engine.process(enumerate_positions(churn), -(2**62), BOOK)
    assert sorted(engine.brokers) == list(range(9000, 10000))
    assert sorted(engine.advertisements.by_node) == list(range(9000, 10000))


def test_a_broker_with_its_own_events_outlives_a_list_that_omits_it_until_quiet_for_the_ttl():
    engine = ShardEngine("cluster:" + C)
    first = [listing(0, [1, 2]), state(t(1), 2, "ONLINE"), listing(2, [1])]
    engine.process(enumerate_positions(first), -(2**62), BOOK)
    assert sorted(engine.brokers) == [1, 2]  # broker 2's state still counts for its lifecycle rules
    engine.process(enumerate_positions([listing(s, [1]) for s in every(10, TTL_S, 10)]), t(10), BOOK)
    assert sorted(engine.brokers) == [1, 2]
    # The next batch's watermark passed broker 2's last report (1 s) + the TTL: it is dropped.
    engine.process(enumerate_positions([listing(TTL_S + 10, [1])]), t(TTL_S + 2), BOOK)
    assert sorted(engine.brokers) == [1]


def test_a_state_of_format_3_loads_with_a_lease_per_pair_and_lets_omitted_pairs_go():
    from streaming.detect.misroutes import Advert  # (format 4's record: this test runs on format 3's code too)

    engine = ShardEngine("cluster:" + C)
    old_layout = {"by_node": {1: frozenset({"x1:9092"}), 3: frozenset({"b3:9092"})}, "lease": Lease(t(0))}
    engine.advertisements = Advertisements()
    engine.advertisements.__dict__.update(old_layout)
    original = Advertisements.__getstate__
    Advertisements.__getstate__ = lambda self: {k: self.__dict__[k] for k in ("by_node", "lease")}
    try:
        written = b"fwds" + bytes([3]) + pickle.dumps(engine, protocol=pickle.HIGHEST_PROTOCOL)
    finally:
        Advertisements.__getstate__ = original
    loaded = load_engine(written)
    assert loaded.advertisements.by_node == {1: Advert(frozenset({"x1:9092"}), t(0), True),
                                             3: Advert(frozenset({"b3:9092"}), t(0), True)}
    assert load_engine(dump_engine(loaded)).advertisements.by_node == loaded.advertisements.by_node
    out = loaded.process(enumerate_positions([listing(10, [1], lambda n: "x1:9092")]), -(2**62), BOOK)
    assert [(c.address, c.node_id, c.until) for c in out.handoffs] == [("b3:9092", 3, None)]
