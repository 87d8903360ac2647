"""A single-process reference detector for the 16 rules, written for reading, not for speed.

    .venv/bin/python bench/reference_detector.py EVENTS.jsonl --alerts-out ALERTS.jsonl

It reads a JSONL file of contract-v1 events and writes the alert lines `fleetwatch replay`
writes for it, in the same order, with the same ids, summaries and details. It follows
streaming/detect/README.md, with the default rule settings (no config file, no per-cluster
overrides), and imports nothing from the project: the standard library only, one event at a
time, in event-time order, with plain dictionaries for the state. `bench/replay_vs_reference.py`
checks fleetwatch against it.

How time works here (README, "Everything here is event time"):
- The watermark `W` is the largest event time read so far minus the allowed lateness. A line
  whose `ts < W` when it is read is late: it is counted and changes nothing.
- The other events are applied in `(ts, line)` order.
- A subject's deadline `T` fires once an event about that subject arrives at a time after `T`
  (the event proves the time passed), or at the end, once the final watermark is past `T`.
  Firing a timer earlier, when the watermark passes it, gives the same alerts: every later
  event about its subject is later than `T` too. So this detector fires timers only at its
  subjects' own events and at the end.
- Which events are "about" a subject is the engine's grouping (README "Forgetting"): a broker's
  own events, the responses of its cluster that list it, answer as it, or report a new active
  controller; every response of a cluster for its controller; every response of a target.

Where the README leaves a choice open, the engine's behaviour on the tests decided; the notes
marked "README:" below say which.

Lines that are not contract-v1 events are skipped and counted (the job quarantines them); the
check is a light one (this is a bench tool: `streaming/contract.py` is the real check).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import time
from collections.abc import Callable, Iterable
from itertools import takewhile
from typing import Any

# -- SPEC defaults (streaming/config.py RuleSettings), written out ------------------------------------

LATENESS = 5000
SESSION_TIMEOUT = 9000
HEARTBEAT_INTERVAL = 2000
FENCED_GRACE = 30000
PARTITION_WINDOW = 15000
STOPPING_TIMEOUT = 120000
RESOLVE_AFTER = 60000
FLAP_THRESHOLD = 4
FLAP_WINDOW = 300000
CONTROLLER_WINDOW = 15000
CONTROLLER_FLAP_THRESHOLD = 3
CONTROLLER_FLAP_WINDOW = 300000
DISAGREEMENT = 30000
UNREACHABLE = 30000
FORGET_VIEWS_AFTER = 600000
STATE_TTL = 86_400_000

SEVERITY = {
    "broker.heartbeat_lost": "critical", "broker.fenced": "warning", "broker.partitioned": "critical",
    "broker.stuck_stopping": "warning", "broker.epoch_regression": "critical", "broker.flapping": "warning",
    "broker.illegal_transition": "info", "cluster.no_controller": "critical",
    "cluster.controller_flapping": "warning", "cluster.controller_disagreement": "warning",
    "cluster.id_changed": "critical", "cluster.id_duplicate": "critical", "cluster.id_invalid": "warning",
    "cluster.unreachable": "critical", "connection.misrouted": "critical", "endpoint.collision": "critical",
}
LEGAL = {("OFFLINE", "FENCED"), ("FENCED", "ONLINE"), ("ONLINE", "FENCED"), ("ONLINE", "STOPPING"),
         ("FENCED", "STOPPING"), ("ONLINE", "OFFLINE"), ("FENCED", "OFFLINE"), ("STOPPING", "OFFLINE")}
VALID_ID = re.compile(r"^[A-Za-z0-9_-]+$")
EVENT_TYPES = ("metadata_response", "broker_state", "broker_heartbeat")

# What caused an alert: (0, (ts, line)) for an event, (1, ()) for a timer. At equal event times,
# alerts fired by an event come first, then by the event's line (README "Alert fields").
TIMER = (1, ())


def address(entry: dict[str, Any]) -> str:
    return f"{entry['host']}:{entry['port']}"


def quiet(heard: dict[str, int], now: int) -> list[str]:
    """The keys heard of last more than the state TTL before `now`, of a dict kept oldest first."""
    return [key for key, _ in takewhile(lambda item: now - item[1] > STATE_TTL, heard.items())]


# -- alerts --------------------------------------------------------------------------------------------


class Alerts:
    """Every alert line written, and the cause of whatever fires or resolves now."""

    def __init__(self) -> None:
        self.lines: list[tuple[tuple[Any, ...], dict[str, Any]]] = []  # (sort key, alert)
        self.cause: tuple[int, tuple[Any, ...]] = TIMER

    def write(self, alert: dict[str, Any], subject: str) -> None:
        at = alert["ends_at"] if alert["status"] == "resolved" else alert["starts_at"]
        phase, position = self.cause
        self.lines.append(((at, phase, position, alert["rule"], subject, alert["status"] == "resolved"), alert))

    def sorted(self) -> list[dict[str, Any]]:
        return [alert for _, alert in sorted(self.lines, key=lambda line: line[0])]


class Incidents:
    """The open alerts of one part of the state (a cluster, a target, the fleet): (rule, subject) -> alert."""

    def __init__(self, alerts: Alerts) -> None:
        self.alerts = alerts
        self.open: dict[tuple[str, str], dict[str, Any]] = {}

    def firing(self, rule: str, subject: str) -> bool:
        return (rule, subject) in self.open

    def fire(self, rule: str, subject: str, at: int, summary: str, *, cluster_id: str | None = None,
             target: str | None = None, broker_id: int | None = None, endpoint: str | None = None,
             **details: Any) -> None:
        if (rule, subject) in self.open:
            return  # one incident at a time: the first firing line stands
        alert = {
            "schema": "fleetwatch.alert/v1",
            "alert_id": hashlib.sha256(f"{rule}|{subject}|{at}".encode()).hexdigest()[:32],
            "rule": rule, "status": "firing", "severity": SEVERITY[rule], "cluster_id": cluster_id,
            "target": target, "broker_id": broker_id, "endpoint": endpoint, "starts_at": at, "ends_at": None,
            "summary": summary, "details": details,
        }
        self.open[(rule, subject)] = alert
        self.alerts.write(alert, subject)

    def resolve(self, rule: str, subject: str, at: int) -> None:
        alert = self.open.pop((rule, subject), None)
        if alert is not None:
            self.alerts.write({**alert, "status": "resolved", "ends_at": max(at, alert["starts_at"])}, subject)


def advance(deadlines: Callable[[], list[int]], on_time: Callable[[int], None], now: int,
            alerts: Alerts) -> None:
    """Fire, in time order, each deadline of a subject that fell due strictly before `now`."""
    cause, alerts.cause = alerts.cause, TIMER
    done = None
    while due := [t for t in deadlines() if t < now and (done is None or t > done)]:
        done = min(due)
        on_time(done)
    alerts.cause = cause


# -- broker rules (README "Broker rules") -------------------------------------------------------------------


class Broker:
    def __init__(self, cluster_id: str | None, broker_id: int, incidents: Incidents) -> None:
        self.cluster_id, self.broker_id, self.inc = cluster_id, broker_id, incidents
        self.subject = f"{cluster_id}/{broker_id}"  # a broker without a cluster id is "None/<id>"
        self.last_hb: int | None = None
        self.takeover: int | None = None  # a new active controller's first report, for every known broker
        self.held = False  # the cluster reports no active controller: the session deadline waits
        self.max_epoch: int | None = None
        self.fenced: bool | None = None
        self.fenced_since: int | None = None
        self.answered_at: int | None = None
        self.counting_since: int | None = None
        self.state: str | None = None
        self.state_since: int | None = None
        self.changes: list[int] = []
        self.last_illegal: int | None = None
        self.last_regression: int | None = None

    def fire(self, rule: str, at: int, summary: str, target: str | None = None, **details: Any) -> None:
        self.inc.fire(rule, self.subject, at, summary, cluster_id=self.cluster_id, broker_id=self.broker_id,
                      target=target, **details)

    def session_start(self) -> int | None:
        if self.last_hb is None or self.takeover is None:
            return self.last_hb
        return max(self.last_hb, self.takeover)

    def deadlines(self) -> list[int]:
        firing, s, out = self.inc.firing, self.subject, []
        start = self.session_start()
        if start is not None and not self.held and not firing("broker.heartbeat_lost", s):
            out.append(start + SESSION_TIMEOUT)
        if self.fenced and self.fenced_since is not None and not firing("broker.fenced", s):
            out.append(self.fenced_since + FENCED_GRACE)
        if firing("broker.partitioned", s):
            out.append(self.answered_at + PARTITION_WINDOW)  # it stops answering
        elif (self.counting_since is not None and start is not None
              and self.counting_since + HEARTBEAT_INTERVAL > start + SESSION_TIMEOUT):
            out.append(self.counting_since + HEARTBEAT_INTERVAL)  # answers start counting after the cut-off
        if self.state == "STOPPING" and not firing("broker.stuck_stopping", s):
            out.append(self.state_since + STOPPING_TIMEOUT)
        if firing("broker.epoch_regression", s):
            out.append(self.last_regression + RESOLVE_AFTER)
        if firing("broker.illegal_transition", s):
            out.append(self.last_illegal + RESOLVE_AFTER)
        if firing("broker.flapping", s):
            out.append(self.changes[-FLAP_THRESHOLD] + FLAP_WINDOW)
        return out

    def on_time(self, now: int) -> None:
        start = self.session_start()
        if start is not None and not self.held and now == start + SESSION_TIMEOUT:
            self.fire("broker.heartbeat_lost", now,
                      f"broker {self.broker_id} sent no heartbeat for {SESSION_TIMEOUT} ms",
                      last_heartbeat_ms=self.last_hb)
        if self.fenced and now == self.fenced_since + FENCED_GRACE:
            self.fire("broker.fenced", now, f"broker {self.broker_id} fenced for more than {FENCED_GRACE} ms",
                      fenced_since_ms=self.fenced_since)
        if self.state == "STOPPING" and now == self.state_since + STOPPING_TIMEOUT:
            self.fire("broker.stuck_stopping", now,
                      f"broker {self.broker_id} STOPPING for more than {STOPPING_TIMEOUT} ms",
                      stopping_since_ms=self.state_since)
        if self.last_regression is not None and now == self.last_regression + RESOLVE_AFTER:
            self.inc.resolve("broker.epoch_regression", self.subject, now)
        if self.last_illegal is not None and now == self.last_illegal + RESOLVE_AFTER:
            self.inc.resolve("broker.illegal_transition", self.subject, now)
        if len(self.changes) >= FLAP_THRESHOLD and now == self.changes[-FLAP_THRESHOLD] + FLAP_WINDOW:
            self.inc.resolve("broker.flapping", self.subject, now)
        self.check_partitioned(now)

    def advance(self, now: int) -> None:
        advance(self.deadlines, self.on_time, now, self.inc.alerts)

    def check_partitioned(self, now: int, target: str | None = None) -> None:
        """Cut off, answers counting, and an answer within the window (README: `answered_at >= now -
        window` is read strictly, as the engine does: at answered_at + window it is no longer answering)."""
        start = self.session_start()
        cut_off = self.inc.firing("broker.heartbeat_lost", self.subject) or (
            bool(self.fenced) and (start is None or now - start >= SESSION_TIMEOUT))
        counting = self.last_hb is None or (self.counting_since is not None
                                            and now >= self.counting_since + HEARTBEAT_INTERVAL)
        answering = self.answered_at is not None and now - self.answered_at < PARTITION_WINDOW
        if cut_off and counting and answering:
            self.fire("broker.partitioned", now,
                      f"broker {self.broker_id} answers clients but has lost its controller session",
                      target=target, last_answer_ms=self.answered_at, last_heartbeat_ms=self.last_hb)
        else:
            self.inc.resolve("broker.partitioned", self.subject, now)

    def observe_fenced(self, fenced: bool, at: int) -> None:
        if fenced and not self.fenced:
            self.fenced_since = at
        elif not fenced:
            self.fenced_since = None
            self.inc.resolve("broker.fenced", self.subject, at)
        self.fenced = fenced

    def on_heartbeat(self, hb: dict[str, Any]) -> None:
        ts, epoch = hb["ts"], hb["broker_epoch"]
        if epoch < 0:
            pass  # unknown epoch: neither a regression nor the highest
        elif self.max_epoch is not None and epoch < self.max_epoch:
            self.last_regression = ts
            self.fire("broker.epoch_regression", ts,
                      f"broker {self.broker_id} sent epoch {epoch} below {self.max_epoch}",
                      broker_epoch=epoch, highest_epoch=self.max_epoch, source=hb["source"])
        else:
            self.max_epoch = epoch
        if self.last_hb is None or ts > self.last_hb:
            self.last_hb, self.counting_since = ts, None
            self.inc.resolve("broker.heartbeat_lost", self.subject, ts)
        if hb.get("fenced") is not None:
            self.observe_fenced(hb["fenced"], ts)
        self.check_partitioned(ts)

    def on_state(self, ev: dict[str, Any]) -> None:
        ts, state = ev["ts"], ev["state"]
        previous = self.state if self.state is not None else ev.get("previous_state")
        if state in ("FENCED", "ONLINE", "OFFLINE"):
            self.observe_fenced(state == "FENCED", ts)
        if previous is not None and previous != state:  # a change
            self.changes = [c for c in self.changes if ts - c < FLAP_WINDOW] + [ts]
            if len(self.changes) >= FLAP_THRESHOLD:
                self.fire("broker.flapping", ts, f"broker {self.broker_id} changed state {len(self.changes)} "
                          f"times within {FLAP_WINDOW} ms", changes=len(self.changes))
        claimed_from = ev.get("previous_state") or previous
        if claimed_from is not None and claimed_from != state and (claimed_from, state) not in LEGAL:
            self.last_illegal = ts
            self.fire("broker.illegal_transition", ts, f"broker {self.broker_id} went {claimed_from} -> {state}",
                      from_state=claimed_from, to_state=state)
        if state != self.state:
            self.state_since = ts
            if state != "STOPPING":
                self.inc.resolve("broker.stuck_stopping", self.subject, ts)
        self.state = state
        self.check_partitioned(ts)

    def on_answer(self, r: dict[str, Any]) -> None:
        ts = r["ts"]
        self.answered_at = ts if self.answered_at is None else max(self.answered_at, ts)
        if self.counting_since is None and self.last_hb is not None and ts >= self.last_hb + HEARTBEAT_INTERVAL:
            self.counting_since = ts
        self.check_partitioned(ts, r["target"])

    def on_listed(self, entry: dict[str, Any], r: dict[str, Any]) -> None:
        if entry.get("fenced") is not None:
            self.observe_fenced(entry["fenced"], r["ts"])
            self.check_partitioned(r["ts"], r["target"])


# -- controller rules (README "Controller rules") --------------------------------------------------------------


class Controller:
    def __init__(self, cluster_id: str, incidents: Incidents) -> None:
        self.cluster_id, self.inc = cluster_id, incidents
        self.none_since: int | None = None
        self.views: dict[int, tuple[int, int | None]] = {}  # responder -> (last heard, controller it named)
        self.agreed: int | None = None
        self.changes: list[int] = []
        self.disagree_since: int | None = None

    def fire(self, rule: str, at: int, summary: str, target: str | None, **details: Any) -> None:
        self.inc.fire(rule, self.cluster_id, at, summary, cluster_id=self.cluster_id, target=target, **details)

    def named(self, now: int) -> dict[str, int]:
        """The controllers named by the responders heard from within the controller window."""
        return {str(node): ctl for node, (heard, ctl) in sorted(self.views.items())
                if ctl is not None and now - heard <= CONTROLLER_WINDOW}

    def deadlines(self) -> list[int]:
        firing, s, out = self.inc.firing, self.cluster_id, []
        if self.none_since is not None and not firing("cluster.no_controller", s):
            out.append(self.none_since + CONTROLLER_WINDOW)
        if self.disagree_since is not None and not firing("cluster.controller_disagreement", s):
            out.append(self.disagree_since + DISAGREEMENT)
        if firing("cluster.controller_flapping", s):
            out.append(self.changes[-CONTROLLER_FLAP_THRESHOLD] + CONTROLLER_FLAP_WINDOW)
        return out

    def on_time(self, now: int) -> None:
        if self.none_since is not None and now == self.none_since + CONTROLLER_WINDOW:
            self.fire("cluster.no_controller", now, f"no active controller reported for {CONTROLLER_WINDOW} ms",
                      None, no_controller_since_ms=self.none_since)
        if self.disagree_since is not None and now == self.disagree_since + DISAGREEMENT:
            if len(set(self.named(now).values())) > 1:
                self.fire("cluster.controller_disagreement", now,
                          f"brokers disagree on the controller for more than {DISAGREEMENT} ms", None,
                          views=self.named(now))
            else:
                self.disagree_since = None  # the views that disagreed went stale: not continuous
        if (len(self.changes) >= CONTROLLER_FLAP_THRESHOLD
                and now == self.changes[-CONTROLLER_FLAP_THRESHOLD] + CONTROLLER_FLAP_WINDOW):
            self.inc.resolve("cluster.controller_flapping", self.cluster_id, now)

    def advance(self, now: int) -> None:
        advance(self.deadlines, self.on_time, now, self.inc.alerts)

    def on_response(self, r: dict[str, Any]) -> bool:
        """True when `r` is the first report of a new active controller (README: a takeover)."""
        if r.get("controller_known") is False:
            return False  # the collector could not tell: says nothing about the controller
        ts, responder = r["ts"], r.get("responder_node_id")
        ctl = r.get("controller_id")
        controller = ctl if ctl is not None and ctl >= 0 else None
        if controller is None:
            # README: "the first no-controller response after one that named a controller"; the
            # engine also starts counting at a no-controller report with none named before it.
            if self.none_since is None:
                self.none_since = ts
        else:
            self.none_since = None
            self.inc.resolve("cluster.no_controller", self.cluster_id, ts)
        if responder is None:
            return False
        if self.disagree_since is not None and len(set(self.named(ts).values())) < 2:
            self.disagree_since = None  # views went stale since the last response: not continuous
        previous_view = self.views.get(responder, (ts, None))[1]
        takeover = (controller is not None and previous_view is not None and previous_view == self.agreed
                    and controller != self.agreed and controller not in set(self.named(ts).values()))
        self.views[responder] = (ts, controller if controller is not None else previous_view)
        self.views = {n: v for n, v in self.views.items() if ts - v[0] <= FORGET_VIEWS_AFTER}
        named = set(self.named(ts).values())
        if len(named) == 1:
            (agreed,) = named
            self.disagree_since = None
            self.inc.resolve("cluster.controller_disagreement", self.cluster_id, ts)
            if self.agreed is not None and agreed != self.agreed:
                self.changes = [c for c in self.changes if ts - c < CONTROLLER_FLAP_WINDOW] + [ts]
                if len(self.changes) >= CONTROLLER_FLAP_THRESHOLD:
                    self.fire("cluster.controller_flapping", ts,
                              f"controller moved {len(self.changes)} times within {CONTROLLER_FLAP_WINDOW} ms",
                              r["target"], controller_id=agreed, previous_controller_id=self.agreed)
            self.agreed = agreed
        elif len(named) > 1 and self.disagree_since is None:
            self.disagree_since = ts
        return takeover


class Cluster:
    """Broker and controller rules of one cluster id (README "Forgetting": a cluster shard)."""

    def __init__(self, cluster_id: str | None, alerts: Alerts) -> None:
        self.cluster_id = cluster_id
        self.inc = Incidents(alerts)
        self.brokers: dict[int, Broker] = {}
        self.controller = Controller(cluster_id or "", self.inc)

    def subjects(self) -> list[Broker | Controller]:
        return [*self.brokers.values(), self.controller]

    def broker(self, broker_id: int, now: int) -> Broker:
        """The broker, with what fell due before `now` fired."""
        if broker_id not in self.brokers:
            self.brokers[broker_id] = Broker(self.cluster_id, broker_id, self.inc)
            self.brokers[broker_id].held = self.controller.none_since is not None
        broker = self.brokers[broker_id]
        broker.advance(now)
        return broker

    def on_broker_event(self, ev: dict[str, Any]) -> None:
        broker = self.broker(ev["broker_id"], ev["ts"])
        if ev["type"] == "broker_heartbeat":
            broker.on_heartbeat(ev)
        else:
            broker.on_state(ev)

    def on_response(self, r: dict[str, Any]) -> None:
        ts = r["ts"]
        self.controller.advance(ts)
        held = self.controller.none_since is not None
        takeover = self.controller.on_response(r)
        holds = self.controller.none_since is not None
        if takeover or held != holds:
            for broker in self.brokers.values():
                broker.advance(ts)
                broker.held = holds  # no active controller reported: nobody holds the sessions
                if takeover:
                    # A new active controller: Kafka's gives every registered broker a full session from now.
                    if broker.last_hb is not None and not self.inc.firing("broker.heartbeat_lost", broker.subject):
                        broker.takeover = ts
                else:
                    broker.advance(ts)  # released by the same controller: a held deadline stands
        for entry in r.get("brokers") or ():
            self.broker(entry["node_id"], ts).on_listed(entry, r)
        if r.get("responder_node_id") is not None:
            self.broker(r["responder_node_id"], ts).on_answer(r)


# -- identity and routing rules of one target (README "Identity and routing rules") ----------------------------


class Target:
    """A target's identity rules and the misroutes of the endpoints probed for it (a target shard).

    README: the misroute of an endpoint is kept per target (two targets probing one endpoint
    keep two incidents), as the engine keeps it in the target's shard."""

    def __init__(self, name: str, alerts: Alerts) -> None:
        self.name = name
        self.inc = Incidents(alerts)
        self.pinned: str | None = None
        self.reported_id = False
        self.failing_since: int | None = None
        self.last_error: str | None = None

    def subjects(self) -> list[Target]:
        return [self]

    def deadlines(self) -> list[int]:
        if self.failing_since is not None and not self.inc.firing("cluster.unreachable", self.name):
            return [self.failing_since + UNREACHABLE]
        return []

    def on_time(self, now: int) -> None:
        if self.failing_since is not None and now == self.failing_since + UNREACHABLE:
            self.inc.fire("cluster.unreachable", self.name, now, f"every probe of {self.name} failed for "
                          f"{UNREACHABLE} ms", target=self.name, failing_since_ms=self.failing_since,
                          last_error=self.last_error)

    def advance(self, now: int) -> None:
        advance(self.deadlines, self.on_time, now, self.inc.alerts)

    def on_response(self, r: dict[str, Any]) -> None:
        self.advance(r["ts"])
        ts, name, ok, cluster_id, expected = r["ts"], self.name, r.get("error") is None, r["cluster_id"], r["expected"]
        if not ok:
            self.last_error = r["error"]
            # README: "first error response after a successful one"; the engine also counts from
            # an error with no success before it.
            if self.failing_since is None:
                self.failing_since = ts
        else:
            self.failing_since = None
            self.inc.resolve("cluster.unreachable", name, ts)
        # An endpoint that answered for another cluster says nothing about this target's identity.
        misrouted = bool(expected and expected.get("cluster_id") and cluster_id
                         and cluster_id != expected["cluster_id"])
        if not misrouted and cluster_id:
            if VALID_ID.match(cluster_id):
                self.reported_id = True
                self.inc.resolve("cluster.id_invalid", name, ts)
            else:
                self.inc.fire("cluster.id_invalid", name, ts, f"{name} reports a cluster id that is not valid "
                              "(KIP-78)", cluster_id=cluster_id, target=name, endpoint=r["endpoint"],
                              reported=cluster_id)
        elif not misrouted and ok and self.reported_id:
            self.inc.fire("cluster.id_invalid", name, ts, f"{name} reported a cluster id before and now reports "
                          "none", target=name, endpoint=r["endpoint"], reported=None)
        if ok and expected is None and cluster_id:  # a bootstrap answer: it speaks for the target's identity
            if self.pinned is None:
                self.pinned = cluster_id
            if cluster_id == self.pinned:
                self.inc.resolve("cluster.id_changed", name, ts)
            else:
                self.inc.fire("cluster.id_changed", name, ts, f"bootstrap of {name} reports cluster id "
                              f"{cluster_id}, pinned {self.pinned}", cluster_id=cluster_id, target=name,
                              endpoint=r["endpoint"], pinned_cluster_id=self.pinned, reported=cluster_id)
        if expected is not None:
            self.check_misrouted(r, ok)

    def check_misrouted(self, r: dict[str, Any], ok: bool) -> None:
        endpoint, expected = r["endpoint"], r["expected"]
        want = {"cluster_id": expected.get("cluster_id"), "node_id": expected.get("node_id")}
        if r.get("error") == "REBOOTSTRAP_REQUIRED":
            self.inc.fire("connection.misrouted", endpoint, r["ts"], f"{endpoint} refused the expected identity "
                          "(REBOOTSTRAP_REQUIRED)", cluster_id=r["cluster_id"], target=self.name,
                          endpoint=endpoint, expected=want, error=r["error"])
            return
        if not ok:
            return  # a transport error says nothing about where the endpoint leads
        got = {"cluster_id": r["cluster_id"], "node_id": r.get("responder_node_id")}
        wrong_cluster = bool(got["cluster_id"] and want["cluster_id"] and got["cluster_id"] != want["cluster_id"])
        wrong_node = got["node_id"] is not None and want["node_id"] is not None and got["node_id"] != want["node_id"]
        if wrong_cluster or wrong_node:
            self.inc.fire("connection.misrouted", endpoint, r["ts"],
                          f"{endpoint} reaches cluster {got['cluster_id']} node {got['node_id']}, "
                          f"expected cluster {want['cluster_id']} node {want['node_id']}",
                          cluster_id=r["cluster_id"], target=self.name, endpoint=endpoint,
                          expected=want, answered=got)
        else:
            self.inc.resolve("connection.misrouted", endpoint, r["ts"])


# -- the rules that compare clusters and targets with each other ------------------------------------------------


class Fleet:
    """cluster.id_duplicate and endpoint.collision, over the whole fleet."""

    def __init__(self, alerts: Alerts) -> None:
        self.inc = Incidents(alerts)
        self.held_by: dict[str, str] = {}  # target -> the id its latest successful bootstrap reported
        self.holders: dict[str, dict[str, frozenset[str]]] = {}  # id -> target -> its advertised endpoints
        self.adverts: dict[tuple[str, int], frozenset[str]] = {}  # (cluster id, node id) -> host:port set
        self.advertisers: dict[str, set[tuple[str, int]]] = {}  # host:port -> the pairs advertising it
        # When each target last bootstrapped, and each cluster id last advertised: oldest first
        # (events come in time order, and one heard again moves to the end).
        self.bootstrapped_at: dict[str, int] = {}
        self.advertised_at: dict[str, int] = {}

    def subjects(self) -> list[Any]:
        return []  # no timers

    @staticmethod
    def heard(times: dict[str, int], key: str, ts: int) -> None:
        times.pop(key, None)
        times[key] = ts

    def forget_quiet(self, now: int) -> None:
        """README "Forgetting", the fleet-wide part; a kept one is looked at again a TTL later."""
        for cluster_id in quiet(self.advertised_at, now):
            pairs = [pair for pair in self.adverts if pair[0] == cluster_id]
            if any(self.inc.firing("endpoint.collision", a) for pair in pairs for a in self.adverts[pair]):
                self.heard(self.advertised_at, cluster_id, now)
                continue
            for pair in pairs:  # none of its addresses collides: withdrawing them resolves nothing
                for a in self.adverts.pop(pair):
                    self.advertisers[a].discard(pair)
            del self.advertised_at[cluster_id]
        for target in quiet(self.bootstrapped_at, now):
            if self.inc.firing("cluster.id_duplicate", self.held_by[target]):
                self.heard(self.bootstrapped_at, target, now)
                continue
            del self.holders[self.held_by.pop(target)][target]  # one holder fewer cannot make a duplicate
            del self.bootstrapped_at[target]

    def on_bootstrap(self, r: dict[str, Any]) -> None:
        """A target holds the id of its latest successful bootstrap answer, with its advertised endpoints."""
        target, cluster_id, ts = r["target"], r["cluster_id"], r["ts"]
        self.heard(self.bootstrapped_at, target, ts)
        before = self.held_by.get(target)
        if before is not None:
            del self.holders[before][target]
        self.held_by[target] = cluster_id
        self.holders.setdefault(cluster_id, {})[target] = frozenset(address(b) for b in r.get("brokers") or ())
        for held_id in sorted({cluster_id, before} - {None}):
            holders = sorted(self.holders[held_id].items())
            disjoint = [(a, b) for i, (a, ea) in enumerate(holders) for b, eb in holders[i + 1:] if ea.isdisjoint(eb)]
            if disjoint:
                a, b = disjoint[0]
                self.inc.fire("cluster.id_duplicate", held_id, ts, f"cluster id {held_id} is reported by {a} and "
                              f"{b}, which share no endpoint", cluster_id=held_id, targets=[a, b])
            else:
                self.inc.resolve("cluster.id_duplicate", held_id, ts)

    def advertise(self, cluster_id: str, node_id: int, addresses: Iterable[str], ts: int,
                  target: str | None) -> None:
        """The advertisement of (cluster id, node id) is the host:port set it was last seen advertising."""
        pair, new = (cluster_id, node_id), frozenset(addresses)
        self.heard(self.advertised_at, cluster_id, ts)
        old = self.adverts.get(pair, frozenset())
        self.adverts[pair] = new
        for a in sorted(old - new):
            self.advertisers[a].discard(pair)
            if len(self.advertisers[a]) < 2:
                self.inc.resolve("endpoint.collision", a, ts)
        for a in sorted(new - old):
            self.advertisers.setdefault(a, set()).add(pair)
            names = sorted(f"{c}/{n}" for c, n in self.advertisers[a])
            if len(names) >= 2:
                self.inc.fire("endpoint.collision", a, ts, f"{a} is advertised by {', '.join(names)}",
                              cluster_id=cluster_id, target=target, endpoint=a, advertised_by=names)


# -- the detector ---------------------------------------------------------------------------------------------


class Part:
    """A part of the state that is forgotten as a whole (README "Forgetting"): a cluster, a target, the fleet."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make
        self.rules = make()
        self.last_event: int | None = None

    def heard(self, ts: int) -> Any:
        """An event of this part at `ts`: after more than a TTL of quiet, what fell due fires, and with
        nothing open the part starts over."""
        if self.last_event is not None and ts - self.last_event > STATE_TTL:
            for subject in self.rules.subjects():
                subject.advance(ts)
            if not self.rules.inc.open:
                self.rules = self.make()
        self.last_event = ts if self.last_event is None else max(self.last_event, ts)
        return self.rules


class Detector:
    def __init__(self) -> None:
        self.alerts = Alerts()
        self.clusters: dict[str, Part] = {}
        self.targets: dict[str, Part] = {}
        self.fleet = Part(lambda: Fleet(self.alerts))

    def cluster(self, cluster_id: str | None, ts: int) -> Cluster:
        key = cluster_id or ""  # null and "" are one cluster without an id
        if key not in self.clusters:
            self.clusters[key] = Part(lambda: Cluster(cluster_id or None, self.alerts))
        return self.clusters[key].heard(ts)

    def target(self, name: str, ts: int) -> Target:
        if name not in self.targets:
            self.targets[name] = Part(lambda: Target(name, self.alerts))
        return self.targets[name].heard(ts)

    def apply(self, ev: dict[str, Any], line: int) -> None:
        ts = ev["ts"]
        self.alerts.cause = (0, (ts, line))
        if ev["type"] == "metadata_response":
            self.target(ev["target"], ts).on_response(ev)
            if ev.get("error") is None and ev["cluster_id"]:
                self.cluster(ev["cluster_id"], ts).on_response(ev)
                fleet = self.fleet_at(ts)
                if ev["expected"] is None:
                    fleet.on_bootstrap(ev)
                for entry in ev.get("brokers") or ():
                    fleet.advertise(ev["cluster_id"], entry["node_id"], [address(entry)], ts, ev["target"])
            return
        self.cluster(ev["cluster_id"], ts).on_broker_event(ev)
        if ev["type"] == "broker_heartbeat" and ev["kind"] == "registration" and ev.get("endpoints"):
            fleet = self.fleet_at(ts)
            if ev["cluster_id"]:
                fleet.advertise(ev["cluster_id"], ev["broker_id"], [address(e) for e in ev["endpoints"]], ts, None)

    def fleet_at(self, ts: int) -> Fleet:
        fleet = self.fleet.heard(ts)
        fleet.forget_quiet(ts)
        return fleet

    def finish(self, watermark: int) -> None:
        """The end of the input is not silence: timers fire up to the final watermark only."""
        for part in [*self.clusters.values(), *self.targets.values()]:
            for subject in part.rules.subjects():
                subject.advance(watermark)


def read_events(lines: Iterable[bytes | str]) -> tuple[list[tuple[int, int, dict[str, Any]]], int, int]:
    """(ts, line, event) of the events on time, and how many lines were late or not events."""
    events, late, skipped, latest = [], 0, 0, None
    for line_no, raw in enumerate(lines):
        try:
            ev = json.loads(raw)
            ok = (ev["schema"] == "fleetwatch.event/v1" and ev["type"] in EVENT_TYPES
                  and type(ev["ts"]) is int and isinstance(ev["source"], str))
        except (ValueError, KeyError, TypeError):
            ok = False
        if not ok:
            skipped += 1
            continue
        if latest is not None and ev["ts"] < latest - LATENESS:
            late += 1  # it arrived after the watermark had passed it: it changes nothing
            continue
        latest = ev["ts"] if latest is None else max(latest, ev["ts"])
        events.append((ev["ts"], line_no, ev))
    return events, late, skipped


def detect(lines: Iterable[bytes | str]) -> tuple[list[dict[str, Any]], int, int]:
    """The alert lines for a stream of JSONL lines, in output order; and the late and skipped counts."""
    events, late, skipped = read_events(lines)
    detector = Detector()
    for _, line_no, ev in sorted(events, key=lambda e: (e[0], e[1])):
        detector.apply(ev, line_no)
    if events:
        detector.finish(max(ts for ts, _, _ in events) - LATENESS)
    return detector.alerts.sorted(), late, skipped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("events", help="contract-v1 events, one JSON object per line")
    parser.add_argument("--alerts-out", required=True, help="where to write the alert lines (JSONL)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        with open(args.events, "rb") as fh:
            alerts, late, skipped = detect(fh)
    except OSError as exc:
        print(f"reference_detector: cannot read {args.events}: {exc.strerror}", file=sys.stderr)
        return 2
    with open(args.alerts_out, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(a) + "\n" for a in alerts)
    print(f"reference: {len(alerts)} alert lines, {late} late, {skipped} skipped, "
          f"{time.monotonic() - started:.2f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
