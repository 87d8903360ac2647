"""Scenarios of the broker rules (SPEC section 4; streaming/detect/brokers.py)."""

from __future__ import annotations

from support.rule_events import (
    B1,
    B2,
    B3,
    B4,
    B5,
    B6,
    EPOCH,
    FENCED,
    FENCED_GRACE,
    FLAP_WINDOW,
    FLAPPING,
    HB_LATE,
    HB_LOST,
    ILLEGAL,
    LATENESS,
    NO_CONTROLLER,
    PARTITION_WINDOW,
    PARTITIONED,
    RESOLVE_AFTER,
    SESSION,
    STOPPING,
    STUCK,
    UNKNOWN,
    C,
    Cases,
    F,
    R,
    answers,
    bk,
    book_with,
    case_adder,
    ctl,
    every,
    hb,
    later,
    merged,
    past,
    resp,
    state,
    t,
)

CASES: Cases = {}
case = case_adder(CASES)


# broker.heartbeat_lost ------------------------------------------------------------------------
case(HB_LOST, "fires session_timeout after the last heartbeat",
     [hb(t(0), 1), hb(t(2), 1), hb(t(4), 1), later(past(t(4) + SESSION))],
     [F(HB_LOST, B1, t(4) + SESSION)], "fires")
case(HB_LOST, "not yet: the watermark reaches the deadline but is not past it",
     [hb(t(0), 1), hb(t(2), 1), hb(t(4), 1), later(t(4) + SESSION + LATENESS)],
     [], "quiet", "watermark")
case(HB_LOST, "a gap of exactly session_timeout is not more than it",
     [hb(t(0), 1), hb(t(9), 1), later(t(9) + SESSION + LATENESS)],
     [], "quiet")
case(HB_LOST, "a gap of session_timeout + 1 ms fires at the deadline and resolves at the heartbeat",
     [hb(t(0), 1), hb(t(9) + 1, 1)],
     [F(HB_LOST, B1, t(0) + SESSION), R(HB_LOST, B1, t(0) + SESSION, t(9) + 1)], "fires", "resolves")
case(HB_LOST, "resolves at the next heartbeat",
     [hb(t(0), 1), hb(t(20), 1), hb(t(22), 1)],
     [F(HB_LOST, B1, t(9)), R(HB_LOST, B1, t(9), t(20))], "resolves")
case(HB_LOST, "resolves after the watermark already fired it",
     [hb(t(0), 1), later(past(t(9))), hb(t(30), 1)],
     [F(HB_LOST, B1, t(9)), R(HB_LOST, B1, t(9), t(30))], "resolves", "watermark")
# broker.heartbeat_late (issue 31; off unless rules.heartbeat_late_ratio is set) ------------------
LATE = book_with(heartbeat_late_ratio=0.5)  # 4.5 s of the 9 s session
case(HB_LATE, "fires at the share of the session, before heartbeat_lost; resolves at the next heartbeat",
     [hb(t(0), 1), hb(t(2), 1), later(past(t(2) + 4500)), hb(t(13), 1)],
     [F(HB_LATE, B1, t(2) + 4500), F(HB_LOST, B1, t(2) + SESSION),
      R(HB_LATE, B1, t(2) + 4500, t(13)), R(HB_LOST, B1, t(2) + SESSION, t(13))], "fires", "resolves", book=LATE)
case(HB_LATE, "a heartbeat exactly at the share is not late; nor are regular ones",
     [*[hb(t(s), 1) for s in every(0, 20, 2)], hb(t(24.5), 1), later(past(t(24.5)))],
     [], "quiet", book=LATE)
case(HB_LATE, "late, then a heartbeat before the session ends: only the warning",
     [hb(t(0), 1), hb(t(6), 1), later(past(t(6)))],
     [F(HB_LATE, B1, t(4.5)), R(HB_LATE, B1, t(4.5), t(6))], "fires", "resolves", book=LATE)
case(HB_LATE, "off by default: the SPEC's rules only",
     [hb(t(0), 1), hb(t(6), 1), later(past(t(6)))],
     [], "quiet")
case(HB_LATE, "a new active controller starts the late clock afresh too",
     [hb(t(0), 1), resp(t(2), "pay", "b2:9092", C, responder=2, controller=3000),
      resp(t(4), "pay", "b2:9092", C, responder=2, controller=3001), hb(t(8), 1), later(past(t(8)))],
     [], "quiet", book=LATE)
case(HB_LATE, "no active controller holds the late deadline as well",
     [hb(t(0), 1), resp(t(1), "pay", "b2:9092", C, responder=2, controller=-1),
      resp(t(7), "pay", "b2:9092", C, responder=2, controller=-1), hb(t(8), 1), later(past(t(8)))],
     [], "quiet", book=LATE)

# Kafka's new active controller gives every registered broker a full session from the moment it
# takes over (ClusterControlManager.activate): the failover pause is not a lost heartbeat.
case(HB_LOST, "a new active controller starts the session afresh",
     [hb(t(0), 1), resp(t(2), "pay", "b2:9092", C, responder=2, controller=3000),
      resp(t(5), "pay", "b2:9092", C, responder=2, controller=3001), hb(t(13), 1),
      later(past(t(13) + SESSION))],
     [F(HB_LOST, B1, t(13) + SESSION)], "quiet", "fires")
case(HB_LOST, "a responder that cannot reach the controller is no takeover",
     [hb(t(0), 1), resp(t(2), "pay", "b2:9092", C, responder=2, controller=3000),
      resp(t(4), "pay", "b3:9092", C, responder=3, controller=-1),
      resp(t(6), "pay", "b2:9092", C, responder=2, controller=3000), later(past(t(0) + SESSION))],
     [F(HB_LOST, B1, t(0) + SESSION)], "fires")
case(HB_LOST, "a responder first heard naming another controller than the rest is no takeover",
     [hb(t(0), 1), resp(t(2), "pay", "b2:9092", C, responder=2, controller=3000),
      resp(t(4), "pay", "b3:9092", C, responder=3, controller=3001),
      resp(t(6), "pay", "b2:9092", C, responder=2, controller=3000), later(past(t(0) + SESSION))],
     [F(HB_LOST, B1, t(0) + SESSION)], "fires")
case(HB_LOST, "a deadline that passed before the takeover still fires at it",
     [hb(t(0), 1), resp(t(2), "pay", "b2:9092", C, responder=2, controller=3000),
      resp(t(10), "pay", "b2:9092", C, responder=2, controller=3001), hb(t(12), 1)],
     [F(HB_LOST, B1, t(0) + SESSION), R(HB_LOST, B1, t(0) + SESSION, t(12))], "fires", "resolves")
case(HB_LOST, "the same controller named again is no takeover",
     [hb(t(0), 1), resp(t(2), "pay", "b2:9092", C, responder=2, controller=3000),
      resp(t(5), "pay", "b2:9092", C, responder=2, controller=3000), later(past(t(0) + SESSION))],
     [F(HB_LOST, B1, t(0) + SESSION)], "fires")
# While every response says there is no active controller, nobody holds a broker's session (and
# nobody can fence it): the deadline waits for a controller to be reported. Measured on Kafka 4.4
# (3 controllers, 3 brokers, 3 s session): the active controller killed, the responders' forwarded
# DescribeQuorum timed out (-1) from 1.9 s on, the new leader's first heartbeats came at 3.1-3.4 s
# and its first report at 3.3 s: past every broker's deadline, and Kafka fenced nobody.
case(HB_LOST, "no active controller reported holds the session; a new controller starts it afresh",
     [hb(t(0), 1), hb(t(0) + 2, 2), ctl(2, 3000, responder=1), ctl(2.01, 3000, responder=2),
      ctl(6, -1, responder=1), ctl(7, -1, responder=2), ctl(8, -1, responder=1), ctl(9.5, -1, responder=2),
      ctl(11, 3001, responder=1), hb(t(11.5), 1), ctl(11.6, 3001, responder=2), hb(t(11.7), 2),
      later(past(t(11.7) + SESSION))],
     [F(HB_LOST, B1, t(11.5) + SESSION), F(HB_LOST, (C, 2), t(11.7) + SESSION)], "quiet", "tricky")
case(HB_LOST, "the same controller reported again lets a held deadline stand (a cut-off responder)",
     [hb(t(0), 1), ctl(2, 3000, responder=2), ctl(8.9, -1, responder=3), ctl(9.2, 3000, responder=2),
      later(past(t(9.2)))],
     [F(HB_LOST, B1, t(0) + SESSION)], "fires", "tricky")
case(HB_LOST, "a deadline before the controller was lost fires; one after waits for the new controller",
     [hb(t(0), 1), ctl(2, 3000, responder=3), hb(t(5), 2), ctl(10, -1, responder=3), ctl(20, -1, responder=3),
      ctl(26, 3001, responder=3), later(past(t(26) + SESSION))],
     [F(HB_LOST, B1, t(0) + SESSION), F(NO_CONTROLLER, C, t(25)), R(NO_CONTROLLER, C, t(25), t(26)),
      F(HB_LOST, (C, 2), t(26) + SESSION)], "fires")
case(HB_LOST, "a broker first heard while no controller is reported is held like the others",
     [ctl(0, 3000, responder=2), ctl(1, -1, responder=2), hb(t(2), 1), ctl(4, -1, responder=2),
      ctl(14, 3001, responder=2), later(past(t(14) + SESSION))],
     [F(HB_LOST, B1, t(14) + SESSION)], "tricky")
# A new KRaft leader epoch (`controller_epoch`) is a new term of the active controller, even of the
# same node: Kafka starts every broker's session afresh then, as on a takeover (issue 31). Measured
# on Kafka 4.4 (1 controller, 3 brokers): the controller killed (SIGKILL) and started 30 s later came
# back as the same id with the next epoch, and fenced nobody.
case(HB_LOST, "the same controller back with a new leader epoch starts every held session afresh",
     [hb(t(0), 1), hb(t(0.2), 2), ctl(2, 3000, responder=1, epoch=5), ctl(2.01, 3000, responder=2, epoch=5),
      *[ctl(s, -1, responder=1 + int(s) % 2) for s in every(4, 29, 1)],
      ctl(30, 3000, responder=1, epoch=6), hb(t(30.5), 1), ctl(30.6, 3000, responder=2, epoch=6), hb(t(30.7), 2),
      later(past(t(30)) + 2000)],
     [F(NO_CONTROLLER, C, t(4) + 15000), R(NO_CONTROLLER, C, t(4) + 15000, t(30))], "quiet", "tricky")
case(HB_LOST, "the same controller back in the same leader epoch lets a held deadline stand",
     [hb(t(0), 1), ctl(2, 3000, responder=2, epoch=5), ctl(8.9, -1, responder=3), ctl(9.2, 3000, responder=2, epoch=5),
      later(past(t(9.2)))],
     [F(HB_LOST, B1, t(0) + SESSION)], "fires", "tricky")
case(HB_LOST, "a new leader epoch of the same controller restarts the session without a hold",
     [hb(t(0), 1), ctl(2, 3000, responder=2, epoch=5), ctl(5, 3000, responder=2, epoch=6),
      later(past(t(5) + SESSION))],
     [F(HB_LOST, B1, t(5) + SESSION)], "fires", "tricky")
case(HB_LOST, "an older leader epoch is no new term",
     [hb(t(0), 1), ctl(2, 3000, responder=2, epoch=6), ctl(5, 3000, responder=3, epoch=5),
      later(past(t(0) + SESSION))],
     [F(HB_LOST, B1, t(0) + SESSION)], "fires")
case(HB_LOST, "a new leader epoch reported by a bootstrap without a known responder restarts the session",
     [hb(t(0), 1), ctl(2, 3000, responder=2, epoch=5),
      resp(t(5), "pay", "boot:9092", C, responder=None, controller=3000, epoch=6),
      later(past(t(5) + SESSION))],
     [F(HB_LOST, B1, t(5) + SESSION)], "fires", "tricky")
case(HB_LOST, "a broker that never heartbeated is not heartbeat-lost",
     [state(t(0), 1, "FENCED", "OFFLINE"), state(t(1), 1, "ONLINE"), later(t(100))],
     [], "quiet")

# broker.fenced --------------------------------------------------------------------------------
case(FENCED, "FENCED state longer than the grace",
     [state(t(0), 2, "FENCED", "OFFLINE"), later(past(t(0) + FENCED_GRACE))],
     [F(FENCED, B2, t(0) + FENCED_GRACE)], "fires")
case(FENCED, "ONLINE exactly at the grace is not longer than it",
     [state(t(0), 2, "FENCED", "OFFLINE"), state(t(30), 2, "ONLINE"), later(t(100))],
     [], "quiet")
case(FENCED, "ONLINE 1 ms after the grace: fired at the grace, resolved at ONLINE",
     [state(t(0), 2, "FENCED", "OFFLINE"), state(t(30) + 1, 2, "ONLINE"), later(t(100))],
     [F(FENCED, B2, t(30)), R(FENCED, B2, t(30), t(30) + 1)], "fires", "resolves")
case(FENCED, "OFFLINE resolves",
     [state(t(0), 2, "FENCED", "OFFLINE"), state(t(45), 2, "OFFLINE"), later(t(100))],
     [F(FENCED, B2, t(30)), R(FENCED, B2, t(30), t(45))], "resolves")
case(FENCED, "brief fencing at start-up is normal",
     [hb(t(0), 2, epoch=7, kind="registration", fenced=True), state(t(0.5), 2, "FENCED", "OFFLINE"),
      hb(t(2), 2, epoch=7, fenced=True), hb(t(4), 2, epoch=7, fenced=False), state(t(4.5), 2, "ONLINE"),
      *[hb(t(s), 2, epoch=7, fenced=False) for s in every(6, 60, 2)]],
     [], "quiet", "tricky")
case(FENCED, "fenced: true in heartbeats",
     [*[hb(t(s), 2, fenced=True) for s in every(0, 40, 2)], hb(t(42), 2, fenced=False)],
     [F(FENCED, B2, t(30)), R(FENCED, B2, t(30), t(42))], "fires", "resolves")
case(FENCED, "fenced: true in a response's broker list",
     [*[resp(t(s), "pay", "b1:9092", C, (C, 1), responder=1,
             brokers=[bk(1, "b1:9092"), bk(2, "b2:9092", fenced=True)]) for s in every(0, 35, 5)],
      resp(t(40), "pay", "b1:9092", C, (C, 1), responder=1, brokers=[bk(1, "b1:9092"), bk(2, "b2:9092", False)])],
     [F(FENCED, B2, t(30)), R(FENCED, B2, t(30), t(40))], "fires", "resolves")
case(FENCED, "a listing without the fenced field says nothing",
     [state(t(0), 2, "FENCED", "OFFLINE"),
      *[resp(t(s), "pay", "b1:9092", C, (C, 1), responder=1, brokers=[bk(1, "b1:9092"), bk(2, "b2:9092")])
        for s in every(5, 40, 5)]],
     [F(FENCED, B2, t(30))], "fires")
case(FENCED, "STOPPING says nothing about fencing",
     [state(t(0), 2, "FENCED", "OFFLINE"), state(t(10), 2, "STOPPING"), state(t(50), 2, "OFFLINE")],
     [F(FENCED, B2, t(30)), R(FENCED, B2, t(30), t(50))], "fires", "resolves")


# broker.partitioned ---------------------------------------------------------------------------
_HB_TO_20 = [hb(t(s), 2) for s in every(0, 20, 2)]  # last heartbeat at 20 s: heartbeat-lost at 29 s
case(PARTITIONED, "answers while heartbeat-lost; resolves when it stops answering",
     merged(_HB_TO_20, answers(every(0, 25, 5)), [later(past(t(25) + PARTITION_WINDOW))]),
     [F(HB_LOST, B2, t(20) + SESSION), F(PARTITIONED, B2, t(20) + SESSION),
      R(PARTITIONED, B2, t(29), t(25) + PARTITION_WINDOW)], "fires", "resolves")
case(PARTITIONED, "resolves when heartbeats resume",
     merged(_HB_TO_20, [hb(t(s), 2) for s in every(35, 45, 2)], answers(every(0, 45, 5))),
     [F(HB_LOST, B2, t(29)), F(PARTITIONED, B2, t(29)), R(HB_LOST, B2, t(29), t(35)),
      R(PARTITIONED, B2, t(29), t(35))], "fires", "resolves")
case(PARTITIONED, "an answer exactly partition_window before is outside the window",
     merged(_HB_TO_20, answers([*every(0, 10, 5), 14]), [later(past(t(29)))]),
     [F(HB_LOST, B2, t(29))], "quiet")
case(PARTITIONED, "an answer 1 ms later is inside it",
     merged(_HB_TO_20[:5], [*answers(every(0, 10, 5)), *answers([14.001])], [later(t(60))]),
     [F(HB_LOST, B2, t(8) + SESSION), F(PARTITIONED, B2, t(17)),
      R(PARTITIONED, B2, t(17), t(14.001) + PARTITION_WINDOW)],
     "fires", "resolves")
case(PARTITIONED, "an answer less than a heartbeat interval after the last heartbeat: a crash, not a partition",
     merged(_HB_TO_20, answers([*every(0, 20, 5), 21.999]), [later(past(t(29)))]),
     [F(HB_LOST, B2, t(29))], "quiet")
case(PARTITIONED, "a thawed broker answers a moment before its first heartbeat: not partitioned",
     merged(_HB_TO_20, answers([*every(0, 20, 5), 40]), [hb(t(40.3), 2), later(t(48))]),
     [F(HB_LOST, B2, t(29)), R(HB_LOST, B2, t(29), t(40.3))], "quiet")
case(PARTITIONED, "answers every second while cut off: fires once the first counting one is an interval old",
     merged(_HB_TO_20[:5], answers(every(0, 30, 1)), [later(past(t(30)))]),
     [F(HB_LOST, B2, t(17)), F(PARTITIONED, B2, t(17))], "fires")
case(PARTITIONED, "cut off before the first counting answer is an interval old: fires then",
     merged(_HB_TO_20, answers([*every(0, 20, 5), 28]), [later(past(t(45)))]),
     [F(HB_LOST, B2, t(29)), F(PARTITIONED, B2, t(30)), R(PARTITIONED, B2, t(30), t(28) + PARTITION_WINDOW)],
     "fires", "resolves")
case(PARTITIONED, "an answer a whole heartbeat interval after it counts",
     merged(_HB_TO_20, answers([*every(0, 20, 5), 22]), [later(past(t(29)))]),
     [F(HB_LOST, B2, t(29)), F(PARTITIONED, B2, t(29))], "fires")
case(PARTITIONED, "fenced and never heartbeated: cut off as soon as it answers",
     [state(t(0), 2, "FENCED", "OFFLINE"), *answers([1]), later(past(t(30)))],
     [F(PARTITIONED, B2, t(1)), R(PARTITIONED, B2, t(1), t(1) + PARTITION_WINDOW), F(FENCED, B2, t(30))],
     "fires", "resolves")
case(PARTITIONED, "fenced but heartbeating: not cut off",
     merged([hb(t(s), 2, fenced=True) for s in every(0, 40, 2)], answers(every(0, 40, 5))),
     [F(FENCED, B2, t(30))], "quiet")
case(PARTITIONED, "another broker's answers do not count",
     merged(_HB_TO_20, answers(every(0, 40, 5), broker=1), [later(t(60))]),
     [F(HB_LOST, B2, t(29))], "quiet")

# broker.stuck_stopping ------------------------------------------------------------------------
case(STUCK, "STOPPING longer than stopping_timeout",
     [state(t(0), 3, "ONLINE", "FENCED"), state(t(10), 3, "STOPPING"), later(past(t(10) + STOPPING))],
     [F(STUCK, B3, t(10) + STOPPING)], "fires")
case(STUCK, "OFFLINE exactly at the timeout",
     [state(t(0), 3, "ONLINE", "FENCED"), state(t(10), 3, "STOPPING"), state(t(130), 3, "OFFLINE"),
      later(t(300))],
     [], "quiet")
case(STUCK, "resolves when it leaves STOPPING",
     [state(t(0), 3, "ONLINE", "FENCED"), state(t(10), 3, "STOPPING"), state(t(200), 3, "OFFLINE")],
     [F(STUCK, B3, t(130)), R(STUCK, B3, t(130), t(200))], "resolves")
case(STUCK, "a repeated STOPPING does not restart the clock",
     [state(t(0), 3, "ONLINE", "FENCED"), state(t(10), 3, "STOPPING"), state(t(100), 3, "STOPPING"),
      later(past(t(130)))],
     [F(STUCK, B3, t(130))], "fires")

# broker.epoch_regression ----------------------------------------------------------------------
case(EPOCH, "a lower epoch fires at once and resolves resolve_after later",
     [hb(t(0), 4, epoch=10), hb(t(2), 4, epoch=9), *[hb(t(s), 4, epoch=10) for s in every(4, 70, 2)]],
     [F(EPOCH, B4, t(2)), R(EPOCH, B4, t(2), t(2) + RESOLVE_AFTER)], "fires", "resolves")
case(EPOCH, "a registration with a lower epoch counts too",
     [hb(t(0), 4, epoch=10), hb(t(2), 4, epoch=8, kind="registration")],
     [F(EPOCH, B4, t(2))], "fires")
case(EPOCH, "equal and rising epochs are normal",
     [hb(t(0), 4, epoch=10), hb(t(2), 4, epoch=10), hb(t(4), 4, epoch=12, kind="registration"),
      hb(t(6), 4, epoch=12)],
     [], "quiet")
# Two processes of broker 4 heartbeat alternately, the zombie with epoch 10, the live one with 11.
case(EPOCH, "interleaved zombie epochs: one incident, resolved after the last stale heartbeat",
     [*[hb(t(s), 4, epoch=10 if round(s) % 2 == 0 else 11) for s in every(0, 20, 1)],
      *[hb(t(s), 4, epoch=11) for s in every(22, 86, 2)]],
     [F(EPOCH, B4, t(2)), R(EPOCH, B4, t(2), t(20) + RESOLVE_AFTER)], "fires", "resolves", "tricky")
case(EPOCH, "a zombie's epoch never becomes the highest",
     [hb(t(0), 4, epoch=11), hb(t(1), 4, epoch=10), hb(t(2), 4, epoch=10), hb(t(3), 4, epoch=11)],
     [F(EPOCH, B4, t(1))], "fires", "tricky")
case(EPOCH, "unknown epochs (-1) mixed with real ones are quiet",
     [hb(t(0), 4, epoch=UNKNOWN), hb(t(1), 4, epoch=10), hb(t(2), 4, epoch=UNKNOWN), hb(t(3), 4, epoch=10),
      hb(t(4), 4, epoch=UNKNOWN), hb(t(5), 4, epoch=12, kind="registration"), hb(t(6), 4, epoch=UNKNOWN),
      hb(t(7), 4, epoch=12)],
     [], "quiet", "tricky")
case(EPOCH, "a real regression behind an unknown epoch still fires, and only it",
     [hb(t(0), 4, epoch=11), hb(t(1), 4, epoch=UNKNOWN), hb(t(2), 4, epoch=10),
      *[hb(t(s), 4, epoch=UNKNOWN if round(s) % 4 == 0 else 11) for s in every(4, 70, 2)]],
     [F(EPOCH, B4, t(2)), R(EPOCH, B4, t(2), t(2) + RESOLVE_AFTER)], "fires", "resolves", "tricky")

# broker.flapping ------------------------------------------------------------------------------
case(FLAPPING, "the fourth change within the window fires; resolves when the oldest leaves",
     [state(t(0), 5, "FENCED", "OFFLINE"), state(t(10), 5, "ONLINE"), state(t(20), 5, "FENCED"),
      state(t(30), 5, "ONLINE"), later(past(t(0) + FLAP_WINDOW))],
     [F(FLAPPING, B5, t(30)), R(FLAPPING, B5, t(30), t(0) + FLAP_WINDOW)], "fires", "resolves")
case(FLAPPING, "with five changes the window of the latest four decides",
     [state(t(0), 5, "FENCED", "OFFLINE"), state(t(10), 5, "ONLINE"), state(t(20), 5, "FENCED"),
      state(t(30), 5, "ONLINE"), state(t(40), 5, "OFFLINE"), later(past(t(10) + FLAP_WINDOW))],
     [F(FLAPPING, B5, t(30)), R(FLAPPING, B5, t(30), t(10) + FLAP_WINDOW)], "resolves")
case(FLAPPING, "four changes spanning exactly the window are not within it",
     [state(t(0), 5, "ONLINE", "FENCED"), state(t(100), 5, "OFFLINE"), state(t(299), 5, "FENCED"),
      state(t(300), 5, "ONLINE"), later(t(700))],
     [], "quiet")
case(FLAPPING, "four changes 1 ms inside the window",
     [state(t(0), 5, "ONLINE", "FENCED"), state(t(100), 5, "OFFLINE"), state(t(299), 5, "FENCED"),
      state(t(300) - 1, 5, "ONLINE"), later(t(700))],
     [F(FLAPPING, B5, t(300) - 1), R(FLAPPING, B5, t(300) - 1, t(0) + FLAP_WINDOW)], "fires", "resolves")
case(FLAPPING, "the first event without previous_state is not a change",
     [state(t(0), 5, "FENCED"), state(t(10), 5, "ONLINE"), state(t(20), 5, "FENCED"), state(t(30), 5, "ONLINE")],
     [], "quiet")
case(FLAPPING, "a repeated state is not a change",
     [state(t(0), 5, "ONLINE", "FENCED"), state(t(10), 5, "ONLINE"), state(t(20), 5, "ONLINE"),
      state(t(30), 5, "OFFLINE"), state(t(40), 5, "OFFLINE"), state(t(50), 5, "FENCED"), state(t(55), 5, "FENCED")],
     [], "quiet")
case(FLAPPING, "heartbeat and response fenced flags are not state changes",
     [*[hb(t(s), 5, fenced=(round(s) % 4 == 0)) for s in every(0, 20, 2)],
      *[resp(t(s), "pay", "b1:9092", C, (C, 1), responder=1, brokers=[bk(5, "b5:9092", fenced=(round(s) % 2 == 0))])
        for s in every(21, 28, 1)]],
     [], "quiet")

# broker.illegal_transition --------------------------------------------------------------------
case(ILLEGAL, "OFFLINE -> ONLINE fires at the event, resolves resolve_after later",
     [state(t(0), 6, "ONLINE", "OFFLINE"), later(past(t(0) + RESOLVE_AFTER))],
     [F(ILLEGAL, B6, t(0)), R(ILLEGAL, B6, t(0), t(0) + RESOLVE_AFTER)], "fires", "resolves")
case(ILLEGAL, "STOPPING -> ONLINE from the last state seen",
     [state(t(0), 6, "FENCED", "OFFLINE"), state(t(10), 6, "STOPPING"), state(t(20), 6, "ONLINE"),
      later(past(t(20) + RESOLVE_AFTER))],
     [F(ILLEGAL, B6, t(20)), R(ILLEGAL, B6, t(20), t(20) + RESOLVE_AFTER)], "fires", "resolves")
case(ILLEGAL, "another illegal transition extends the incident",
     [state(t(0), 6, "ONLINE", "OFFLINE"), state(t(30), 6, "OFFLINE"), state(t(40), 6, "ONLINE"),
      later(past(t(40) + RESOLVE_AFTER))],
     [F(ILLEGAL, B6, t(0)), R(ILLEGAL, B6, t(0), t(40) + RESOLVE_AFTER)], "resolves")
case(ILLEGAL, "not resolved before resolve_after",
     [state(t(0), 6, "ONLINE", "OFFLINE"), later(t(0) + RESOLVE_AFTER + LATENESS)],
     [F(ILLEGAL, B6, t(0))], "fires", "watermark")
case(ILLEGAL, "every lifecycle transition is legal",
     [state(t(s), 6, to, "OFFLINE" if s == 0 else None) for s, to in enumerate(
         ["FENCED", "ONLINE", "FENCED", "STOPPING", "OFFLINE", "FENCED", "ONLINE", "STOPPING", "OFFLINE",
          "FENCED", "ONLINE", "OFFLINE", "FENCED", "OFFLINE"])],
     [], "quiet", book=book_with(flap_threshold=100))
# Real Kafka 4.4 fences a broker when its controlled shutdown is done (issue 31, measured): legal.
case(ILLEGAL, "STOPPING -> FENCED: a controlled shutdown that finished",
     [state(t(0), 6, "ONLINE", "FENCED"), state(t(1), 6, "STOPPING"), state(t(5), 6, "FENCED")],
     [], "quiet")
for _frm, _to in [("OFFLINE", "ONLINE"), ("OFFLINE", "STOPPING"), ("STOPPING", "ONLINE")]:
    case(ILLEGAL, f"{_frm} -> {_to} is illegal",
         [state(t(0), 6, _to, _frm)], [F(ILLEGAL, B6, t(0))], "fires")


# Forgetting one broker (README "Forgetting", issue 27): its cluster goes on (broker 2's reports),
# but broker 1 is heard of by nothing for longer than the state TTL (one day), with nothing open.
DAY_S = 86_400
case(ILLEGAL, "a broker quiet for longer than the state TTL starts over: its last state is forgotten",
     [state(t(0), 1, "OFFLINE"), *[state(t(s), 2, "ONLINE") for s in (0, DAY_S / 2, DAY_S)],
      state(t(DAY_S + 1), 1, "ONLINE")],
     [], "quiet", "tricky")
case(ILLEGAL, "a broker quiet for the state TTL exactly still has its last state",
     [state(t(0), 1, "OFFLINE"), *[state(t(s), 2, "ONLINE") for s in (0, DAY_S / 2)],
      state(t(DAY_S), 1, "ONLINE")],
     [F(ILLEGAL, B1, t(DAY_S))], "fires")
