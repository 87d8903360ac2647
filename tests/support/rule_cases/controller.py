"""Scenarios of the controller rules (SPEC section 4; streaming/detect/controller.py)."""

from __future__ import annotations

from typing import Any

from streaming.records.contract import Event
from support.rule_events import (
    CONTROLLER_FLAP_WINDOW,
    CONTROLLER_WINDOW,
    CTL_DISAGREE,
    CTL_FLAPPING,
    DISAGREEMENT,
    NO_CONTROLLER,
    C,
    Cases,
    F,
    R,
    case_adder,
    ctl,
    every,
    later,
    merged,
    past,
    resp,
    t,
)

CASES: Cases = {}
case = case_adder(CASES)


# cluster.no_controller ------------------------------------------------------------------------
case(NO_CONTROLLER, "no controller for controller_window; resolves when one is reported",
     [ctl(0, 1), ctl(5, -1), ctl(10, -1), ctl(15, -1), ctl(20, -1), ctl(25, 1)],
     [F(NO_CONTROLLER, C, t(5) + CONTROLLER_WINDOW), R(NO_CONTROLLER, C, t(20), t(25))], "fires", "resolves")
case(NO_CONTROLLER, "a controller reported exactly at the window's end",
     [ctl(0, 1), ctl(5, -1), ctl(10, -1), ctl(15, -1), ctl(20, 1), later(t(100))],
     [], "quiet")
case(NO_CONTROLLER, "a null controller_id is no controller; the timer fires on the watermark",
     [ctl(0, 1), ctl(5, None), later(past(t(20)))],
     [F(NO_CONTROLLER, C, t(20))], "fires", "watermark")
case(NO_CONTROLLER, "error responses are not 'no controller'",
     [ctl(0, 1), *[resp(t(s), "pay", "b1:9092", None, (C, 1), error="TIMEOUT") for s in every(5, 25, 5)],
      ctl(28, 1), later(t(80))],
     [], "quiet")

# cluster.controller_flapping ------------------------------------------------------------------
case(CTL_FLAPPING, "the third change fires; resolves when the oldest leaves the window",
     [ctl(0, 1), ctl(10, 2), ctl(20, 3), ctl(30, 1), later(past(t(10) + CONTROLLER_FLAP_WINDOW))],
     [F(CTL_FLAPPING, C, t(30)), R(CTL_FLAPPING, C, t(30), t(10) + CONTROLLER_FLAP_WINDOW)], "fires", "resolves")
case(CTL_FLAPPING, "three changes spanning exactly the window",
     [ctl(0, 1), ctl(10, 2), ctl(20, 3), ctl(310, 1), later(t(700))],
     [], "quiet")
case(CTL_FLAPPING, "a return from no controller to the same one is no change",
     [ctl(0, 1), ctl(5, -1), ctl(10, 1), ctl(12, -1), ctl(14, 1), ctl(20, 2), ctl(25, 1), later(t(60))],
     [], "quiet", "tricky")
# A new leader epoch of the same node restarts the brokers' sessions (rule_cases/broker.py), but the
# controller did not move: flapping and disagreement compare controller ids only.
case(CTL_FLAPPING, "new leader epochs of the same controller are no change",
     [ctl(s, 3000, responder=1, epoch=e) for e, s in enumerate((0, 10, 20, 30, 40), start=5)] + [later(t(60))],
     [], "quiet", "tricky")
case(CTL_DISAGREE, "responders naming one controller in different epochs agree",
     [ctl(s, 3000, responder=1 + int(s) % 2, epoch=5 + int(s) % 2) for s in every(0, 40, 1)] + [later(t(80))],
     [], "quiet")
case(CTL_FLAPPING, "bootstrap responses without a responder do not count",
     [ctl(0, 1), *[resp(t(s), "pay", "b1:9092", C, None, responder=None, controller=c)
                   for s, c in [(5, 2), (6, 3), (7, 2), (8, 3)]], ctl(10, 1)],
     [], "quiet")


# Two responders; at each failover responder 1 learns the new controller first and responder 2
# lags behind (15 s the first time): a momentary disagreement, and one change of the agreed one.
def _two_responders(until: float, view: Any) -> list[Event]:
    out = []
    for s in every(0, until, 5):
        out.append(ctl(s, view(1, s), responder=1))
        out.append(ctl(s + 0.01, view(2, s + 0.01), responder=2))
    return out


def _failover_view(responder: int, s: float) -> int:
    if s < 10 or (responder == 2 and s < 25):
        return 1
    if s < 60:
        return 2
    if s < 80:
        return 3
    return 1


case(CTL_FLAPPING, "failover with a momentary disagreement counts once",
     _two_responders(100, _failover_view),
     [F(CTL_FLAPPING, C, t(80.01))], "fires", "tricky")
case(CTL_DISAGREE, "momentary disagreement during a failover (< 30 s) does not fire",
     _two_responders(40, lambda r, s: 1 if s < 10 or (r == 2 and s < 25) else 2),
     [], "quiet", "tricky")


# cluster.controller_disagreement --------------------------------------------------------------
def _disagree_view(responder: int, s: float) -> int:
    return 2 if responder == 2 and s < 45 else 1


case(CTL_DISAGREE, "different controllers for longer than disagreement_ms; resolves when they agree",
     _two_responders(50, _disagree_view),
     [F(CTL_DISAGREE, C, t(0.01) + DISAGREEMENT), R(CTL_DISAGREE, C, t(30.01), t(45.01))], "fires", "resolves")
case(CTL_DISAGREE, "disagreement for exactly disagreement_ms",
     _two_responders(50, lambda r, s: 2 if r == 2 and s < 30 else 1),
     [], "quiet")
case(CTL_DISAGREE, "a responder not heard within controller_window is left out",
     [ctl(0, 1, responder=1), ctl(0.01, 2, responder=2), *[ctl(s, 1, responder=1) for s in every(5, 60, 5)]],
     [], "quiet")
case(CTL_DISAGREE, "the timer fires on the watermark",
     [ctl(0, 1, responder=1), ctl(0.01, 2, responder=2),
      *[e for s in every(5, 30, 5) for e in (ctl(s, 1, responder=1), ctl(s + 0.01, 2, responder=2))],
      later(past(t(30.01)))],
     [F(CTL_DISAGREE, C, t(30.01))], "fires", "watermark")
case(CTL_DISAGREE, "views going stale between responses interrupt the disagreement",
     # From 15.01 s to 20 s only responder 3 is fresh: they agree; the disagreement restarts at 20 s.
     merged([ctl(0, 1, responder=1), ctl(0.01, 2, responder=2), ctl(10.02, 2, responder=3)],
            [ctl(s, 1, responder=1) for s in every(20, 60, 5)],
            [ctl(s + 0.02, 2, responder=3) for s in every(20, 60, 5)]),
     [F(CTL_DISAGREE, C, t(20) + DISAGREEMENT)], "fires", "tricky")
case(CTL_DISAGREE, "views that went stale before the deadline do not fire it",
     [ctl(0, 1, responder=1), ctl(0.01, 2, responder=2), later(past(t(30.01)))],
     [], "quiet", "tricky")
