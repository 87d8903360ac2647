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
    state,
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


# What "at the same time" means (issue 27, README "Identity and routing rules"): a pair listed by
# its cluster advertises until a broker list of its cluster omits it; a registered pair until the
# broker is no longer registered (OFFLINE) or registers elsewhere.
def _listing(s: float, *nodes: tuple[int, str]) -> list:
    """A bootstrap of pay (cluster C) listing these (node id, address) pairs."""
    return [boot(s, "pay", C, "b1:9092", [bk(n, a) for n, a in nodes])]


case(COLLISION, "a broker replaced by a new node id at its host:port is no collision",
     [*(e for s in every(0, 60, 10) for e in _listing(s, (1, "b1:9092"), (3, "b3:9092"))),
      *(e for s in every(70, 3000, 10) for e in _listing(s, (1, "b1:9092"), (7, "b3:9092")))],
     [], "quiet", "tricky")
case(COLLISION, "a new node registered at a listed node's address collides until a list omits the old node",
     [*_listing(0, (1, "b1:9092"), (3, "b3:9092")), *_listing(10, (1, "b1:9092"), (3, "b3:9092")),
      hb(t(15), 7, kind="registration", endpoints=["b3:9092"]),
      *_listing(20, (1, "b1:9092"), (7, "b3:9092")), hb(t(22), 7), *_listing(30, (1, "b1:9092"), (7, "b3:9092"))],
     [F(COLLISION, "b3:9092", t(15)), R(COLLISION, "b3:9092", t(15), t(20))], "fires", "resolves", "tricky")
case(COLLISION, "a list that omits a pair another cluster lists does not end the other's",
     [boot(0, "pay", C, "b1:9092", [bk(1, "x1:9092")]), boot(5, "doc", D, "d1:9092", [bk(5, "x1:9092")]),
      boot(10, "pay", C, "b1:9092", [bk(2, "x2:9092")]), boot(15, "pay", C, "b1:9092", [bk(1, "x1:9092")])],
     [F(COLLISION, "x1:9092", t(5)), R(COLLISION, "x1:9092", t(5), t(10)), F(COLLISION, "x1:9092", t(15))],
     "fires", "resolves")
case(COLLISION, "two nodes of one cluster that swap addresses in one list do not collide",
     [*_listing(0, (1, "x1:9092"), (2, "x2:9092")), *_listing(5, (1, "x2:9092"), (2, "x1:9092"))],
     [], "quiet", "tricky")
case(COLLISION, "registrations: the collision ends when a broker is no longer registered (OFFLINE)",
     [hb(t(0), 1, kind="registration", endpoints=["x1:9092"]),
      hb(t(5), 5, kind="registration", cluster=D, endpoints=["x1:9092"]),
      *merged([hb(t(s), 1) for s in every(7, 19, 4)], [hb(t(s), 5, cluster=D) for s in every(9, 17, 4)]),
      state(t(20), 5, "OFFLINE", "FENCED", cluster=D)],
     [F(COLLISION, "x1:9092", t(5)), R(COLLISION, "x1:9092", t(5), t(20))], "fires", "resolves")
case(COLLISION, "a registered pair that its cluster's lists omit (fenced: Metadata leaves it out) still advertises",
     [*_listing(0, (1, "b1:9092"), (2, "b2:9092")), boot(3, "doc", D, "d1:9092", [bk(5, "x5:9092")]),
      hb(t(5), 2, kind="registration", epoch=2, endpoints=["x5:9092"]), state(t(5), 2, "FENCED", "ONLINE"),
      *merged(_listing(10, (1, "b1:9092")), _listing(20, (1, "b1:9092")), [hb(t(s), 2, epoch=2) for s in (11, 19)]),
      hb(t(25), 2, kind="registration", epoch=3, endpoints=["b2:9092"])],
     [F(COLLISION, "x5:9092", t(5)), R(COLLISION, "x5:9092", t(5), t(25))], "fires", "resolves", "tricky")
