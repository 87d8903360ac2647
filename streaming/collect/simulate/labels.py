"""The simulator's own oracle: the alerts its stream must raise.

Broker faults write their labels down themselves (their timing is designed, see faults.py);
the rules whose outcome depends on how probe rounds and transitions fall are followed here by
`RuleTrackers`, a re-implementation of the rules of streaming/detect/README.md fed with the
events one simulated cluster emits. It does not import the detectors: it is what they are
checked against.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from streaming import alert
from streaming.collect.simulate.spec import RULES
from streaming.contract import REBOOTSTRAP_REQUIRED

__all__ = ["Label", "RuleTrackers"]

_VALID_ID = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass
class Label:
    """One alert the stream must raise, and the fault that caused it; `ends_at` None while open."""

    rule: str
    cluster_id: str | None
    target: str | None
    broker_id: int | None
    endpoint: str | None
    starts_at: int
    fault: str | None
    ends_at: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "severity": alert.RULES[self.rule].severity, "cluster_id": self.cluster_id,
                "target": self.target, "broker_id": self.broker_id, "endpoint": self.endpoint,
                "starts_at": self.starts_at, "ends_at": self.ends_at, "fault": self.fault}


Deadline = tuple[int, Callable[[int], None]]


class RuleTrackers:
    """The rules whose outcome depends on how responses and transitions fall, as the README
    reads them, fed with the events of one simulated cluster in event-time order.

    Only this cluster's own events can open these alerts: a fault that reaches another cluster
    keeps that cluster quiet and gets answers with its usual identity, which change nothing.
    Timers run per subject, like the detectors: a timer fires when a later event of its subject
    proves its time passed, or at the end once the final watermark passed it.
    """

    def __init__(self, cluster_id: str, labels: list[Label], fault: Callable[[], str | None]) -> None:
        self.cluster_id = cluster_id
        self.labels = labels
        self.fault = fault
        self.open: dict[tuple[str, Any], Label] = {}
        # broker.flapping: node -> last state, change times
        self.states: dict[int, str] = {}
        self.changes: dict[int, list[int]] = {}
        # controller rules
        self.none_since: int | None = None
        self.views: dict[int, tuple[int, int | None]] = {}
        self.agreed: int | None = None
        self.moves: list[int] = []
        self.disagree_since: int | None = None
        # target rules
        self.pinned: dict[str, str] = {}
        self.reported: set[str] = set()
        self.failing_since: dict[str, int] = {}
        # cluster.id_duplicate: target -> (cluster id, advertised endpoints)
        self.held: dict[str, tuple[str, frozenset[str]]] = {}

    # -- bookkeeping ----------------------------------------------------------------------------

    def _fire(self, rule: str, subject: Any, at: int, *, cluster_id: str | None = None,
              target: str | None = None, broker_id: int | None = None, endpoint: str | None = None) -> None:
        if (rule, subject) not in self.open:
            label = Label(rule, cluster_id, target, broker_id, endpoint, at, self.fault())
            self.open[(rule, subject)] = label
            self.labels.append(label)

    def _resolve(self, rule: str, subject: Any, at: int) -> None:
        label = self.open.pop((rule, subject), None)
        if label is not None:
            label.ends_at = at

    @staticmethod
    def _run_due(deadlines: Callable[[], list[Deadline]], now: int) -> None:
        """Apply the deadlines due strictly before `now`, in time order."""
        while due := [d for d in deadlines() if d[0] < now]:
            at, action = min(due, key=lambda d: d[0])
            action(at)

    def _broker_deadlines(self, node: int) -> list[Deadline]:
        if ("broker.flapping", node) not in self.open:
            return []
        oldest = self.changes[node][-RULES.flap_threshold]
        return [(oldest + RULES.flap_window_ms, partial(self._resolve, "broker.flapping", node))]

    def _cluster_deadlines(self) -> list[Deadline]:
        c = self.cluster_id
        out: list[Deadline] = []
        if self.none_since is not None and ("cluster.no_controller", c) not in self.open:
            out.append((self.none_since + RULES.controller_window_ms,
                        partial(self._fire, "cluster.no_controller", c, cluster_id=c)))
        if self.disagree_since is not None and ("cluster.controller_disagreement", c) not in self.open:
            out.append((self.disagree_since + RULES.disagreement_ms,
                        partial(self._fire, "cluster.controller_disagreement", c, cluster_id=c)))
        if ("cluster.controller_flapping", c) in self.open:
            oldest = self.moves[-RULES.controller_flap_threshold]
            out.append((oldest + RULES.controller_flap_window_ms,
                        partial(self._resolve, "cluster.controller_flapping", c)))
        return out

    def _target_deadlines(self, target: str) -> list[Deadline]:
        since = self.failing_since.get(target)
        if since is None or ("cluster.unreachable", target) in self.open:
            return []
        return [(since + RULES.unreachable_ms, partial(self._fire, "cluster.unreachable", target,
                                                        target=target))]

    def touch_broker(self, node: int, at: int) -> None:
        """An event about broker `node` at `at`: its timers due before then have fired."""
        if ("broker.flapping", node) in self.open:
            self._run_due(partial(self._broker_deadlines, node), at)

    def finish(self, watermark: int) -> None:
        """The end of the stream: every timer the final watermark passed has fired."""
        for node in list(self.changes):
            self.touch_broker(node, watermark)
        self._run_due(self._cluster_deadlines, watermark)
        for target in list(self.failing_since):
            self._run_due(partial(self._target_deadlines, target), watermark)

    # -- inputs ----------------------------------------------------------------------------------

    def on_state(self, ev: dict[str, Any]) -> None:
        at, node, state = ev["ts"], ev["broker_id"], ev["state"]
        self.touch_broker(node, at)
        previous = self.states.get(node, ev.get("previous_state"))
        self.states[node] = state
        if previous is None or previous == state:
            return
        window = RULES.flap_window_ms
        changes = [c for c in self.changes.get(node, []) if at - c < window] + [at]
        self.changes[node] = changes
        if len(changes) >= RULES.flap_threshold:
            self._fire("broker.flapping", node, at, cluster_id=self.cluster_id, broker_id=node)

    def on_response(self, ev: dict[str, Any]) -> None:
        at = ev["ts"]
        ok = ev["error"] is None
        if ok and ev["cluster_id"] == self.cluster_id:
            for entry in ev["brokers"] or ():
                self.touch_broker(entry["node_id"], at)
            if ev["responder_node_id"] is not None:
                self.touch_broker(ev["responder_node_id"], at)
            self._run_due(self._cluster_deadlines, at)
            self._controller(ev)
        if ev["target"] in self.failing_since:
            self._run_due(partial(self._target_deadlines, ev["target"]), at)
        self._target(ev, ok)
        self._misrouted(ev, ok)
        if ok and ev["expected"] is None and ev["cluster_id"]:
            self._duplicate(ev)

    def _controller(self, ev: dict[str, Any]) -> None:
        at, c = ev["ts"], self.cluster_id
        named_id = ev["controller_id"]
        controller = named_id if named_id is not None and named_id >= 0 else None
        if controller is None:
            if self.none_since is None:
                self.none_since = at
        else:
            self.none_since = None
            self._resolve("cluster.no_controller", c, at)
        responder = ev["responder_node_id"]
        if responder is None:
            return
        previous_view = self.views.get(responder, (at, None))[1]
        self.views[responder] = (at, controller if controller is not None else previous_view)
        named = {view for heard, view in self.views.values()
                 if view is not None and at - heard <= RULES.controller_window_ms}
        if len(named) == 1:
            (agreed,) = named
            self.disagree_since = None
            self._resolve("cluster.controller_disagreement", c, at)
            if self.agreed is not None and agreed != self.agreed:
                window = RULES.controller_flap_window_ms
                self.moves = [m for m in self.moves if at - m < window] + [at]
                if len(self.moves) >= RULES.controller_flap_threshold:
                    self._fire("cluster.controller_flapping", c, at, cluster_id=c, target=ev["target"])
            self.agreed = agreed
        elif len(named) > 1 and self.disagree_since is None:
            self.disagree_since = at

    def _target(self, ev: dict[str, Any], ok: bool) -> None:
        at, target, reported = ev["ts"], ev["target"], ev["cluster_id"]
        if ok:
            self.failing_since.pop(target, None)
            self._resolve("cluster.unreachable", target, at)
        else:
            self.failing_since.setdefault(target, at)
        if reported:
            if _VALID_ID.match(reported):
                self.reported.add(target)
                self._resolve("cluster.id_invalid", target, at)
            else:
                self._fire("cluster.id_invalid", target, at, cluster_id=reported, target=target,
                           endpoint=ev["endpoint"])
        elif ok and target in self.reported:
            self._fire("cluster.id_invalid", target, at, target=target, endpoint=ev["endpoint"])
        if ok and ev["expected"] is None and reported:
            pinned = self.pinned.setdefault(target, reported)
            if reported == pinned:
                self._resolve("cluster.id_changed", target, at)
            else:
                self._fire("cluster.id_changed", target, at, cluster_id=reported, target=target,
                           endpoint=ev["endpoint"])

    def _misrouted(self, ev: dict[str, Any], ok: bool) -> None:
        expected = ev["expected"]
        if expected is None:
            return
        at, endpoint = ev["ts"], ev["endpoint"]
        wrong = ev["error"] == REBOOTSTRAP_REQUIRED or (ok and (
            (ev["cluster_id"] and ev["cluster_id"] != expected["cluster_id"])
            or (ev["responder_node_id"] is not None and ev["responder_node_id"] != expected["node_id"])))
        if wrong:
            self._fire("connection.misrouted", endpoint, at, cluster_id=ev["cluster_id"],
                       target=ev["target"], endpoint=endpoint)
        elif ok:
            self._resolve("connection.misrouted", endpoint, at)

    def _duplicate(self, ev: dict[str, Any]) -> None:
        at, target, reported = ev["ts"], ev["target"], ev["cluster_id"]
        endpoints = frozenset(f"{b['host']}:{b['port']}" for b in ev["brokers"] or ())
        previous = self.held.get(target)
        self.held[target] = (reported, endpoints)
        for cluster_id in sorted({reported} | ({previous[0]} if previous else set())):
            sets = [eps for cid, eps in self.held.values() if cid == cluster_id]
            if any(not (a & b) for i, a in enumerate(sets) for b in sets[i + 1:]):
                self._fire("cluster.id_duplicate", cluster_id, at, cluster_id=cluster_id)
            else:
                self._resolve("cluster.id_duplicate", cluster_id, at)
