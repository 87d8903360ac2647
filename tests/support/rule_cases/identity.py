"""Scenarios of the identity rules (SPEC section 4; streaming/detect/identity.py)."""

from __future__ import annotations

from streaming.config import ClusterConfig, RuleBook, RuleSettings
from support.rule_events import (
    A_ID,
    B_ID,
    G_ID,
    ID_CHANGED,
    ID_DUPLICATE,
    ID_INVALID,
    L_ID,
    M_ID,
    MISROUTED,
    UNREACHABLE,
    UNREACHABLE_RULE,
    C,
    Cases,
    D,
    F,
    R,
    bk,
    boot,
    case_adder,
    every,
    fail,
    later,
    merged,
    past,
    resp,
    t,
)

CASES: Cases = {}
case = case_adder(CASES)


# cluster.id_changed ---------------------------------------------------------------------------
case(ID_CHANGED, "a bootstrap reports another id; resolves when it reports the pinned one",
     [boot(0, "sea", A_ID), boot(5, "sea", A_ID), boot(10, "sea", B_ID), boot(15, "sea", B_ID),
      boot(20, "sea", A_ID)],
     [F(ID_CHANGED, "sea", t(10)), R(ID_CHANGED, "sea", t(10), t(20))], "fires", "resolves")
case(ID_CHANGED, "the same id all along",
     [boot(s, "sea", A_ID) for s in every(0, 30, 5)], [], "quiet")
case(ID_CHANGED, "pinned by expected_cluster_id: the first id seen is already wrong",
     [boot(0, "sea", A_ID), boot(10, "sea", B_ID)],
     [F(ID_CHANGED, "sea", t(0)), R(ID_CHANGED, "sea", t(0), t(10))], "fires", "resolves",
     book=RuleBook(RuleSettings(), [ClusterConfig(name="sea", expected_cluster_id=B_ID)]))
case(ID_CHANGED, "misrouted (non-bootstrap) answers and errors say nothing about the target's id",
     [boot(0, "sea", A_ID),
      resp(t(5), "sea", "s2:9092", B_ID, (A_ID, 2), responder=1),
      resp(t(6), "sea", "s3:9092", "not a valid id!", (A_ID, 3), responder=3),
      boot(10, "sea", None, error="CONNECTION_REFUSED"),
      resp(t(12), "sea", "s2:9092", B_ID, (A_ID, 2), responder=1),
      boot(15, "sea", A_ID)],
     [F(MISROUTED, "s2:9092", t(5)), F(MISROUTED, "s3:9092", t(6))], "quiet", "tricky")

# cluster.id_duplicate -------------------------------------------------------------------------
case(ID_DUPLICATE, "two targets with disjoint endpoints report one id; resolves when they overlap",
     [boot(0, "logs", L_ID, "l1:9092", [bk(1, "l1:9092"), bk(2, "l2:9092")]),
      boot(1, "logs-dr", L_ID, "d1:9092", [bk(11, "d1:9092")]),
      boot(5, "logs", L_ID, "l1:9092", [bk(1, "l1:9092"), bk(2, "l2:9092")]),
      boot(20, "logs-dr", L_ID, "d1:9092", [bk(11, "d1:9092"), bk(1, "l1:9092")])],
     [F(ID_DUPLICATE, L_ID, t(1)), R(ID_DUPLICATE, L_ID, t(1), t(20))], "fires", "resolves")
case(ID_DUPLICATE, "two names for one cluster (shared endpoints) are no duplicate",
     [boot(0, "logs", L_ID, "l1:9092", [bk(1, "l1:9092"), bk(2, "l2:9092")]),
      boot(1, "logs-alias", L_ID, "l2:9092", [bk(1, "l1:9092"), bk(2, "l2:9092")])],
     [], "quiet")
case(ID_DUPLICATE, "resolves when one target stops holding the id",
     [boot(0, "logs", L_ID, "l1:9092", [bk(1, "l1:9092")]),
      boot(1, "logs-dr", L_ID, "d1:9092", [bk(11, "d1:9092")]),
      boot(10, "logs-dr", D, "d1:9092", [])],
     [F(ID_DUPLICATE, L_ID, t(1)), F(ID_CHANGED, "logs-dr", t(10)), R(ID_DUPLICATE, L_ID, t(1), t(10))],
     "resolves")
case(ID_DUPLICATE, "a non-bootstrap answer does not hold an id",
     [boot(0, "logs", L_ID, "l1:9092", [bk(1, "l1:9092")]),
      resp(t(1), "logs-dr", "d1:9092", L_ID, (L_ID, 11), responder=11, brokers=[bk(11, "d1:9092")])],
     [], "quiet")

# Cases that cross keys: a target whose reported id changes leaves one id's holders and joins another's.
case(ID_DUPLICATE, "a target that reports another id leaves the first id's duplicate and joins the second's",
     [boot(0, "logs", L_ID, "l1:9092", [bk(1, "l1:9092")]),
      boot(1, "logs-dr", L_ID, "d1:9092", [bk(11, "d1:9092")]),
      boot(2, "meta", M_ID, "m1:9092", [bk(1, "m1:9092")]),
      boot(10, "logs-dr", M_ID, "d2:9092", [bk(12, "d2:9092")]),
      boot(20, "logs-dr", M_ID, "d2:9092", [bk(12, "d2:9092"), bk(1, "m1:9092")])],
     [F(ID_DUPLICATE, L_ID, t(1)), R(ID_DUPLICATE, L_ID, t(1), t(10)), F(ID_CHANGED, "logs-dr", t(10)),
      F(ID_DUPLICATE, M_ID, t(10)), R(ID_DUPLICATE, M_ID, t(10), t(20))], "fires", "resolves", "tricky")
case(ID_DUPLICATE, "two names for one cluster drift apart (shared, then disjoint endpoints) and back",
     [boot(0, "logs", L_ID, "l1:9092", [bk(1, "l1:9092"), bk(2, "l2:9092")]),
      boot(1, "logs-alias", L_ID, "l2:9092", [bk(2, "l2:9092")]),
      boot(10, "logs-alias", L_ID, "a9:9092", [bk(9, "a9:9092")]),
      boot(20, "logs", L_ID, "l1:9092", [bk(1, "l1:9092"), bk(2, "l2:9092"), bk(9, "a9:9092")])],
     [F(ID_DUPLICATE, L_ID, t(10)), R(ID_DUPLICATE, L_ID, t(10), t(20))], "fires", "resolves")

# cluster.id_invalid ---------------------------------------------------------------------------
case(ID_INVALID, "an id outside [A-Za-z0-9_-]; resolves at a valid one",
     [boot(0, "inv", G_ID), boot(5, "inv", "bad.id"), boot(10, "inv", G_ID)],
     [F(ID_CHANGED, "inv", t(5)), F(ID_INVALID, "inv", t(5)),
      R(ID_CHANGED, "inv", t(5), t(10)), R(ID_INVALID, "inv", t(5), t(10))], "fires", "resolves")
for _none in (None, ""):
    case(ID_INVALID, f"a successful response with cluster_id {_none!r} after an id",
         [boot(0, "inv", G_ID), boot(5, "inv", _none), boot(10, "inv", G_ID)],
         [F(ID_INVALID, "inv", t(5)), R(ID_INVALID, "inv", t(5), t(10))], "fires", "resolves")
case(ID_INVALID, "a cluster that never had an id may report none",
     [boot(s, "inv", None) for s in every(0, 20, 5)], [], "quiet")
case(ID_INVALID, "an error response without an id is not invalid",
     [boot(0, "inv", G_ID), boot(5, "inv", None, error="TIMEOUT"), boot(10, "inv", G_ID)], [], "quiet")
case(ID_INVALID, "an invalid id from a non-bootstrap probe of the target",
     [boot(0, "inv", G_ID), resp(t(5), "inv", "i1:9092", "bad id", (None, 1), responder=1),
      resp(t(10), "inv", "i1:9092", G_ID, (G_ID, 1), responder=1)],
     [F(ID_INVALID, "inv", t(5)), R(ID_INVALID, "inv", t(5), t(10))], "fires", "resolves")


# cluster.unreachable --------------------------------------------------------------------------
case(UNREACHABLE_RULE, "every response an error for unreachable_ms; resolves at a success",
     [boot(0, "pay", C, "b1:9092"), *[fail(s) for s in every(5, 35, 5)], boot(40, "pay", C, "b1:9092")],
     [F(UNREACHABLE_RULE, "pay", t(5) + UNREACHABLE), R(UNREACHABLE_RULE, "pay", t(35), t(40))],
     "fires", "resolves")
case(UNREACHABLE_RULE, "a success exactly at the deadline",
     [boot(0, "pay", C, "b1:9092"), *[fail(s) for s in every(5, 30, 5)], boot(35, "pay", C, "b1:9092"),
      later(t(100))],
     [], "quiet")
case(UNREACHABLE_RULE, "the timer fires on the watermark",
     [boot(0, "pay", C, "b1:9092"), fail(5, error="TIMEOUT"), fail(10, error="TLS_ERROR"), later(past(t(35)))],
     [F(UNREACHABLE_RULE, "pay", t(35))], "fires", "watermark")
case(UNREACHABLE_RULE, "another target's success does not help",
     merged([boot(0, "pay", C, "b1:9092"), *[fail(s) for s in every(5, 40, 5)]],
            [boot(s, "doc", D, "d1:9092") for s in every(1, 41, 5)]),
     [F(UNREACHABLE_RULE, "pay", t(35))], "fires")
