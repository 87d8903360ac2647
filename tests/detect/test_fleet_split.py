"""What the rules that compare clusters and targets decide across keys: their shards are split.

`endpoint.collision` is decided per address and `cluster.id_duplicate` per cluster id, by the
second pass, from what the cluster and target shards hand on; an advertisement or a held id
moves between addresses and ids, and a holding not heard of for the state TTL ends, per address
and per id (streaming/detect/README.md, "Shards and scale-out", "Forgetting"). The moves are rule
scenarios in tests/support/rule_cases/; here the forgetting, with the default TTL of one day,
checked on the engine (every batching, pickled) and on the reference detector of bench/.
"""

from __future__ import annotations

from support.reference import as_lines, reference_alerts
from support.rule_events import (
    COLLISION,
    ID_CHANGED,
    ID_DUPLICATE,
    L_ID,
    M_ID,
    C,
    D,
    E,
    F,
    R,
    bk,
    boot,
    later,
    lines,
    run,
    t,
)

from streaming.config import RuleSettings

TTL_S = RuleSettings().state_ttl_ms // 1000


def filler(until: float) -> list:
    """Events of an unrelated target every 40,000 s: the watermark moves on."""
    return [later(t(s)) for s in range(40_000, int(until), 40_000)]


def same_on_the_reference(events: list) -> None:
    assert reference_alerts(as_lines(events)) == run(events)


def test_a_collision_ends_with_the_advertisement_of_a_cluster_gone_quiet():
    # C advertised x1 and x2 once, at 0: a TTL later, at each address, C's advertisement has ended.
    events = [boot(0, "pay", C, "b1:9092", [bk(1, "x1:9092"), bk(2, "x2:9092")]),
              boot(5, "doc", D, "d1:9092", [bk(5, "x1:9092")]), *filler(TTL_S + 100),
              boot(TTL_S + 100, "echo", E, "e1:9092", [bk(3, "x2:9092")])]
    assert lines(events) == [F(COLLISION, "x1:9092", t(5)), R(COLLISION, "x1:9092", t(5), t(TTL_S))]
    same_on_the_reference(events)


def test_a_cluster_quiet_for_longer_than_the_ttl_is_withdrawn_from_every_address():
    def then_d_at(s: float) -> list:
        return [boot(0, "pay", C, "b1:9092", [bk(1, "x1:9092"), bk(2, "x2:9092")]), *filler(s),
                boot(s, "doc", D, "d1:9092", [bk(5, "x1:9092"), bk(6, "x2:9092")])]

    assert lines(then_d_at(TTL_S + 1)) == []
    assert lines(then_d_at(TTL_S)) == [F(COLLISION, "x1:9092", t(TTL_S)), F(COLLISION, "x2:9092", t(TTL_S))]
    same_on_the_reference(then_d_at(TTL_S + 1))
    same_on_the_reference(then_d_at(TTL_S))


def test_a_target_that_moved_to_another_id_and_went_quiet_holds_neither():
    events = [boot(0, "a", L_ID, "a1:9092", [bk(1, "a1:9092")]), boot(1, "b", L_ID, "b1:9092", [bk(2, "b1:9092")]),
              boot(10, "b", M_ID, "b2:9092", [bk(3, "b2:9092")]), *filler(TTL_S + 20),
              boot(TTL_S + 20, "c", M_ID, "c1:9092", [bk(4, "c1:9092")]),
              boot(TTL_S + 30, "d", L_ID, "d1:9092", [bk(5, "d1:9092")])]
    assert lines(events) == [F(ID_DUPLICATE, L_ID, t(1)), F(ID_CHANGED, "b", t(10)),
                             R(ID_DUPLICATE, L_ID, t(1), t(10))]
    same_on_the_reference(events)


def test_a_duplicate_ends_with_the_held_id_of_a_target_gone_quiet():
    # a bootstrapped once, at 0: a TTL later it holds L_ID no more, and b alone is no duplicate.
    events = [boot(0, "a", L_ID, "a1:9092", [bk(1, "a1:9092")]), boot(1, "b", L_ID, "b1:9092", [bk(2, "b1:9092")]),
              *filler(2 * TTL_S),
              boot(2 * TTL_S, "b", L_ID, "b1:9092", [bk(2, "b1:9092"), bk(9, "b9:9092")])]
    assert lines(events) == [F(ID_DUPLICATE, L_ID, t(1)), R(ID_DUPLICATE, L_ID, t(1), t(TTL_S))]
    same_on_the_reference(events)


def test_a_duplicate_of_targets_that_go_on_bootstrapping_outlives_the_ttl():
    every_hour = range(0, 2 * TTL_S, 3600)
    events = sorted([boot(s, "a", L_ID, "a1:9092", [bk(1, "a1:9092")]) for s in every_hour]
                    + [boot(s + 1, "b", L_ID, "b1:9092", [bk(2, "b1:9092")]) for s in every_hour]
                    + [boot(2 * TTL_S, "b", L_ID, "b1:9092", [bk(2, "b1:9092"), bk(1, "a1:9092")])],
                    key=lambda e: e.ts)
    assert lines(events) == [F(ID_DUPLICATE, L_ID, t(1)), R(ID_DUPLICATE, L_ID, t(1), t(2 * TTL_S))]
    same_on_the_reference(events)
