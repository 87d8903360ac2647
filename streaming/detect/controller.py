"""Controller rules: no controller, a controller that keeps moving, responders that disagree."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from streaming.config import RuleSettings
from streaming.detect.alerts import Emitter, Incidents
from streaming.detect.naming import duration_text
from streaming.records.contract import MetadataResponse

__all__ = ["ClusterTracker"]

NO_CONTROLLER = "cluster.no_controller"
FLAPPING = "cluster.controller_flapping"
DISAGREEMENT = "cluster.controller_disagreement"


@dataclass
class ClusterTracker:
    """The controller as the successful responses of one cluster report it: a `Tracker`."""

    cluster_id: str
    none_since: int | None = None
    # responder node id -> (last heard, last controller it named)
    views: dict[int, tuple[int, int | None]] = field(default_factory=dict)
    agreed: int | None = None
    # The highest KRaft leader epoch reported with a controller (`controller_epoch`), None before one.
    leader_epoch: int | None = None
    changes: list[int] = field(default_factory=list)
    disagree_since: int | None = None
    target: str | None = None
    controller_id: int | None = None
    last_response_ms: int | None = None
    # Controller changes not yet handed to the store: (ts, controller id or None for none).
    history: list[tuple[int, int | None]] = field(default_factory=list)
    last_recorded: int | None = -1
    # Whether a collector that says its rounds (observers.py) watches the cluster (if not, the deadlines
    # run on event time alone).
    in_rounds: bool = False
    # The latest report of the controller (a response that could tell, or a quorum reading).
    reported_ms: int | None = None

    @property
    def subject(self) -> str:
        return self.cluster_id

    def _fire(self, incidents: Incidents, out: Emitter, rule: str, at: int, summary: str,
              target: str | None, **details: Any) -> None:
        incidents.fire(out, rule, self.subject, at, summary, cluster_id=self.cluster_id, target=target,
                       details=details)

    def deadlines(self, rules: RuleSettings, incidents: Incidents) -> list[int]:
        firing = incidents.open
        out = []
        if self.none_since is not None and (NO_CONTROLLER, self.subject) not in firing:
            out.append(self.none_since + rules.controller_window_ms)
        if self.disagree_since is not None and (DISAGREEMENT, self.subject) not in firing:
            out.append(self.disagree_since + rules.disagreement_ms)
        if self.in_rounds and self.reported_ms is not None:
            # Watched in rounds: no controller, or views that disagree, held at the deadline is shown by a
            # report at or after it (README "Collectors: rounds, gaps, leaving"), not by a collector gone
            # quiet, nor by a round whose every exchange failed (it tells nothing of the controller).
            out = [t for t in out if t <= self.reported_ms]
        if (FLAPPING, self.subject) in firing and len(self.changes) >= rules.controller_flap_threshold:
            out.append(self.changes[-rules.controller_flap_threshold] + rules.controller_flap_window_ms)
        return out

    def earliest(self, rules: RuleSettings, incidents: Incidents) -> float:
        return min(self.deadlines(rules, incidents), default=math.inf)  # (a few deadlines: looked at each time)

    def on_time(self, now: int, rules: RuleSettings, incidents: Incidents, out: Emitter) -> None:
        if self.none_since is not None and now == self.none_since + rules.controller_window_ms:
            self._fire(incidents, out, NO_CONTROLLER, now,
                       f"no active controller reported for {duration_text(rules.controller_window_ms)}", None,
                       no_controller_since_ms=self.none_since)
        if self.disagree_since is not None and now == self.disagree_since + rules.disagreement_ms:
            if len(self._controllers_named(now, rules)) > 1:
                self._fire(incidents, out, DISAGREEMENT, now,
                           f"brokers disagree on the controller for more than {duration_text(rules.disagreement_ms)}",
                           None, views=self._named(now, rules))
            else:
                # The views that disagreed went stale (not heard within controller_window_ms).
                self.disagree_since = None
        threshold = rules.controller_flap_threshold
        if len(self.changes) >= threshold and now == self.changes[-threshold] + rules.controller_flap_window_ms:
            incidents.resolve(out, FLAPPING, self.subject, now)

    def advance_to(self, now: int, rules: RuleSettings, incidents: Incidents, out: Emitter) -> None:
        done = None
        while True:
            due = [t for t in self.deadlines(rules, incidents) if t < now and (done is None or t > done)]
            if not due:
                return
            done = min(due)
            self.on_time(done, rules, incidents, out)

    def _named(self, now: int, rules: RuleSettings) -> dict[str, int]:
        """Controllers named by the responders heard from within the controller window."""
        return {str(node): ctl for node, (heard, ctl) in sorted(self.views.items())
                if ctl is not None and now - heard <= rules.controller_window_ms}

    def _controllers_named(self, now: int, rules: RuleSettings) -> set[int]:
        """The set of `_named`'s controllers (asked for at every response, so without its dict)."""
        window = rules.controller_window_ms
        return {ctl for heard, ctl in self.views.values() if ctl is not None and now - heard <= window}

    def on_response(self, r: MetadataResponse, rules: RuleSettings, incidents: Incidents,
                    out: Emitter) -> bool:
        """Apply one successful response; True when it is the first report of a new active
        controller, or of a new leader epoch (a *takeover*: streaming/detect/README.md,
        `broker.heartbeat_lost`). Flapping and disagreement compare controller ids only."""
        self.target = r.target
        self.last_response_ms = r.ts
        if not r.controller_known:
            return False  # the collector could not tell: neither "no controller" nor a responder's view
        controller = r.controller_id if r.controller_id is not None and r.controller_id >= 0 else None
        new_term = self.report(r.ts, controller, r.controller_epoch, incidents, out)
        if r.responder_node_id is None:
            return new_term
        if self.disagree_since is not None and len(self._controllers_named(r.ts, rules)) < 2:
            # Views went stale since the last response: the disagreement was not continuous.
            self.disagree_since = None
        _, previous_view = self.views.get(r.responder_node_id, (r.ts, None))
        # A responder that named the agreed controller now names one nobody names: the first report
        # of a new active controller. (No controller named, or a responder first heard naming
        # another one than the rest, is not.)
        takeover = new_term or (
            controller is not None and previous_view is not None and previous_view == self.agreed
            and controller != self.agreed and controller not in self._controllers_named(r.ts, rules))
        self.views[r.responder_node_id] = (r.ts, controller if controller is not None else previous_view)
        self.views = {n: v for n, v in self.views.items() if r.ts - v[0] <= rules.forget_after_ms}
        named = self._controllers_named(r.ts, rules)
        if len(named) == 1:
            (agreed,) = named
            self.disagree_since = None
            incidents.resolve(out, DISAGREEMENT, self.subject, r.ts)
            if self.agreed is not None and agreed != self.agreed:
                window = rules.controller_flap_window_ms
                self.changes = [c for c in self.changes if r.ts - c < window] + [r.ts]
                if len(self.changes) >= rules.controller_flap_threshold:
                    self._fire(incidents, out, FLAPPING, r.ts,
                               f"controller moved {len(self.changes)} times within {duration_text(window)}",
                               r.target, controller_id=agreed, previous_controller_id=self.agreed)
            if agreed != self.agreed:
                self._record(r.ts, agreed)
            self.agreed = agreed
        elif len(named) > 1 and self.disagree_since is None:
            self.disagree_since = r.ts
        return takeover

    def report(self, ts: int, controller: int | None, epoch: int | None, incidents: Incidents, out: Emitter) -> bool:
        """The active controller `controller` (None: none) reported at `ts`, in term `epoch` (None: not
        told), by a response or a quorum reading: True when the term is new (a *takeover*)."""
        self.controller_id = controller
        self.reported_ms = ts if self.reported_ms is None else max(self.reported_ms, ts)
        if controller is None:
            if self.none_since is None:
                self.none_since = ts
                self._record(ts, None)
        else:
            if self.none_since is not None:
                self._record(ts, controller)
            self.none_since = None
            incidents.resolve(out, NO_CONTROLLER, self.subject, ts)
        # A leader epoch above every one reported is a new term of the active controller: of another
        # node, or of the same node restarted or re-elected. Like a new node, it starts every broker's
        # session afresh (Kafka's ClusterControlManager.activate runs at every new term).
        epoch = epoch if controller is not None else None
        new_term = epoch is not None and self.leader_epoch is not None and epoch > self.leader_epoch
        if epoch is not None and (self.leader_epoch is None or epoch > self.leader_epoch):
            self.leader_epoch = epoch
        return new_term

    def _record(self, ts: int, controller: int | None) -> None:
        if controller != self.last_recorded:
            self.history.append((ts, controller))
            self.last_recorded = controller

    def drain_history(self) -> list[dict[str, Any]]:
        rows = [{"cluster_id": self.cluster_id, "ts": ts, "controller_id": c} for ts, c in self.history]
        self.history.clear()
        return rows

    def snapshot(self) -> dict[str, Any]:
        return {"cluster_id": self.cluster_id, "target": self.target, "controller_id": self.controller_id,
                "last_response_ms": self.last_response_ms, "updated_ms": self.last_response_ms or 0}
