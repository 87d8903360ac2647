"""Scenarios of misrouted connections and endpoint collisions (SPEC section 4; streaming/detect/misroutes.py)."""

from __future__ import annotations

from streaming.config import ClusterConfig, RuleBook, RuleSettings
from support.rule_events import (
    BIL,
    COLLISION,
    MISROUTED,
    O_ID,
    C,
    Cases,
    D,
    E,
    F,
    R,
    bk,
    boot,
    case_adder,
    every,
    hb,
    merged,
    probe,
    resp,
    t,
)

CASES: Cases = {}
case = case_adder(CASES)


# connection.misrouted -------------------------------------------------------------------------
case(MISROUTED, "another cluster answers; resolves when the endpoint answers as expected",
     [probe(0, O_ID, 2), probe(5, BIL, 1), probe(10, BIL, 1), probe(15, O_ID, 2)],
     [F(MISROUTED, "o2:9092", t(5)), R(MISROUTED, "o2:9092", t(5), t(15))], "fires", "resolves")
case(MISROUTED, "another node of the same cluster answers",
     [probe(0, O_ID, 2), probe(5, O_ID, 3), probe(10, O_ID, 2)],
     [F(MISROUTED, "o2:9092", t(5)), R(MISROUTED, "o2:9092", t(5), t(10))], "fires", "resolves")
case(MISROUTED, "REBOOTSTRAP_REQUIRED is a misroute",
     [probe(0, O_ID, 2), probe(5, None, None, error="REBOOTSTRAP_REQUIRED"), probe(10, O_ID, 2)],
     [F(MISROUTED, "o2:9092", t(5)), R(MISROUTED, "o2:9092", t(5), t(10))], "fires", "resolves", "tricky")
case(MISROUTED, "transport errors are not misroutes",
     [probe(0, O_ID, 2), *[probe(s, None, None, error=e) for s, e in
                           [(5, "CONNECTION_REFUSED"), (10, "TIMEOUT"), (15, "TLS_ERROR"), (20, "AUTH_FAILED")]],
      probe(25, O_ID, 2)],
     [], "quiet", "tricky")
case(MISROUTED, "transport errors do not resolve a misroute either",
     [probe(0, O_ID, 2), probe(5, BIL, 1), probe(10, None, None, error="TIMEOUT"),
      probe(12, None, None, error="CONNECTION_REFUSED"), probe(15, O_ID, 2)],
     [F(MISROUTED, "o2:9092", t(5)), R(MISROUTED, "o2:9092", t(5), t(15))], "resolves", "tricky")
case(MISROUTED, "a bootstrap answer is never a misroute",
     [boot(0, "ord", O_ID, "o2:9092"), resp(t(5), "ord", "o2:9092", O_ID, None, responder=3)],
     [], "quiet")
case(MISROUTED, "misrouted answers do not count for the target's identity",
     merged([boot(0, "ord", O_ID, "o1:9092"), *[probe(s, BIL, 1) for s in every(5, 25, 5)], probe(30, O_ID, 2)],
            [boot(s, "ord", O_ID, "o1:9092") for s in every(6, 26, 5)]),
     [F(MISROUTED, "o2:9092", t(5)), R(MISROUTED, "o2:9092", t(5), t(30))], "fires", "resolves", "tricky",
     book=RuleBook(RuleSettings(), [ClusterConfig(name="ord", expected_cluster_id=O_ID)]))

# endpoint.collision ---------------------------------------------------------------------------
case(COLLISION, "two (cluster, node) pairs advertise one host:port; resolves when one moves",
     [boot(0, "pay", C, "b1:9092", [bk(1, "x1:9092")]), boot(5, "doc", D, "d1:9092", [bk(5, "x1:9092")]),
      boot(10, "pay", C, "b1:9092", [bk(1, "x9:9092")])],
     [F(COLLISION, "x1:9092", t(5)), R(COLLISION, "x1:9092", t(5), t(10))], "fires", "resolves")
case(COLLISION, "registration endpoints are advertisements",
     [hb(t(0), 1, kind="registration", endpoints=["x1:9092", "x2:9093"]),
      boot(5, "doc", D, "d1:9092", [bk(5, "x2:9093")]),
      hb(t(8), 1, kind="registration", epoch=2, endpoints=["x1:9092"])],
     [F(COLLISION, "x2:9093", t(5)), R(COLLISION, "x2:9093", t(5), t(8))], "fires", "resolves")
case(COLLISION, "an advertisement stays current until the pair advertises something else",
     [boot(0, "pay", C, "b1:9092", [bk(1, "x1:9092")]), boot(100, "doc", D, "d1:9092", [bk(5, "x1:9092")])],
     [F(COLLISION, "x1:9092", t(100))], "fires")
case(COLLISION, "the same pair again, or different addresses, do not collide",
     [boot(0, "pay", C, "b1:9092", [bk(1, "x1:9092"), bk(2, "x2:9092")]),
      boot(5, "pay", C, "b1:9092", [bk(1, "x1:9092"), bk(2, "x2:9092")]),
      boot(6, "doc", D, "d1:9092", [bk(1, "d1:9092")]),
      hb(t(7), 1, kind="registration", endpoints=["x1:9092"])],
     [], "quiet")
case(COLLISION, "a broker list repeated after a registration moved its pair advertises the pair again",
     [boot(0, "pay", C, "b1:9092", [bk(1, "x1:9092")]), boot(5, "doc", D, "d1:9092", [bk(5, "x1:9092")]),
      hb(t(8), 1, kind="registration", epoch=2, endpoints=["x7:9092"]),
      boot(10, "pay", C, "b1:9092", [bk(1, "x1:9092")])],
     [F(COLLISION, "x1:9092", t(5)), R(COLLISION, "x1:9092", t(5), t(8)), F(COLLISION, "x1:9092", t(10))],
     "fires", "resolves", "tricky")
case(COLLISION, "one pair moving between two addresses does not collide with itself",
     [boot(0, "pay", C, "b1:9092", [bk(1, "x1:9092")]), boot(5, "pay", C, "b1:9092", [bk(1, "x2:9092")]),
      boot(10, "pay", C, "b1:9092", [bk(1, "x1:9092")])],
     [], "quiet")


# Cases that cross keys: one event withdraws a pair from one address and counts it at another.
case(COLLISION, "an advertisement that moves is withdrawn from its old address and counted at the new one",
     [boot(0, "pay", C, "b1:9092", [bk(1, "x1:9092")]), boot(5, "doc", D, "d1:9092", [bk(5, "x2:9092")]),
      boot(10, "pay", C, "b1:9092", [bk(1, "x2:9092")]),
      boot(15, "doc", D, "d1:9092", [bk(5, "x2:9092"), bk(7, "x1:9092")]),
      boot(20, "pay", C, "b1:9092", [bk(1, "x1:9092")])],
     [F(COLLISION, "x2:9092", t(10)), R(COLLISION, "x2:9092", t(10), t(20)), F(COLLISION, "x1:9092", t(20))],
     "fires", "resolves", "tricky")
case(COLLISION, "two clusters collide, one moves away, and a third takes the address it moved to",
     [boot(0, "pay", C, "b1:9092", [bk(1, "x1:9092")]), boot(5, "doc", D, "d1:9092", [bk(5, "x1:9092")]),
      boot(10, "doc", D, "d1:9092", [bk(5, "x2:9092")]), boot(15, "echo", E, "e1:9092", [bk(3, "x2:9092")]),
      boot(20, "pay", C, "b1:9092", [bk(1, "x1:9092")])],
     [F(COLLISION, "x1:9092", t(5)), R(COLLISION, "x1:9092", t(5), t(10)), F(COLLISION, "x2:9092", t(15))],
     "fires", "resolves", "tricky")
case(COLLISION, "a registration moves a pair onto an address another pair holds",
     [hb(t(0), 1, kind="registration", endpoints=["x1:9092", "x2:9093"]),
      boot(5, "doc", D, "d1:9092", [bk(5, "x3:9092")]),
      hb(t(8), 1, kind="registration", epoch=2, endpoints=["x3:9092"]),
      boot(10, "doc", D, "d1:9092", [bk(5, "x1:9092")])],
     [F(COLLISION, "x3:9092", t(8)), R(COLLISION, "x3:9092", t(8), t(10))], "fires", "resolves")
