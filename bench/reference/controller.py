"""The controller rules of one cluster (README "Controller rules")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .defaults import (
    CONTROLLER_FLAP_THRESHOLD,
    CONTROLLER_FLAP_WINDOW,
    CONTROLLER_WINDOW,
    DISAGREEMENT,
    FORGET_VIEWS_AFTER,
)
from .incidents import Incidents, advance, seconds

__all__ = ["Controller"]


class Controller:
    def __init__(self, cluster_id: str, incidents: Incidents,
                 observed_until: Callable[[], int | None] | None = None) -> None:
        self.cluster_id, self.inc = cluster_id, incidents
        # README "Collectors": watched in rounds, no controller or a disagreement falls due once a report of
        # the controller at or after its deadline shows it still so.
        self.observed_until = observed_until or (lambda: None)
        self.reported: int | None = None  # the latest report of the controller
        self.none_since: int | None = None
        self.views: dict[int, tuple[int, int | None]] = {}  # responder -> (last heard, controller it named)
        self.agreed: int | None = None
        self.epoch: int | None = None  # the highest leader epoch reported with a controller
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
        if self.observed_until() is not None and self.reported is not None:
            out = [t for t in out if t <= self.reported]
        if firing("cluster.controller_flapping", s):
            out.append(self.changes[-CONTROLLER_FLAP_THRESHOLD] + CONTROLLER_FLAP_WINDOW)
        return out

    def on_time(self, now: int) -> None:
        if self.none_since is not None and now == self.none_since + CONTROLLER_WINDOW:
            self.fire("cluster.no_controller", now, f"no active controller reported for {seconds(CONTROLLER_WINDOW)}",
                      None, no_controller_since_ms=self.none_since)
        if self.disagree_since is not None and now == self.disagree_since + DISAGREEMENT:
            if len(set(self.named(now).values())) > 1:
                self.fire("cluster.controller_disagreement", now,
                          f"brokers disagree on the controller for more than {seconds(DISAGREEMENT)}", None,
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
        self.reported = ts if self.reported is None else max(self.reported, ts)
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
        # README: a leader epoch above every one reported is a takeover too (a new term, same node or not).
        epoch = r.get("controller_epoch") if controller is not None else None
        new_term = False
        if epoch is not None:
            new_term = self.epoch is not None and epoch > self.epoch
            self.epoch = epoch if self.epoch is None else max(self.epoch, epoch)
        if responder is None:
            return new_term
        if self.disagree_since is not None and len(set(self.named(ts).values())) < 2:
            self.disagree_since = None  # views went stale since the last response: not continuous
        previous_view = self.views.get(responder, (ts, None))[1]
        takeover = new_term or (controller is not None and previous_view is not None and previous_view == self.agreed
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
                              f"controller moved {len(self.changes)} times within {seconds(CONTROLLER_FLAP_WINDOW)}",
                              r["target"], controller_id=agreed, previous_controller_id=self.agreed)
            self.agreed = agreed
        elif len(named) > 1 and self.disagree_since is None:
            self.disagree_since = ts
        return takeover
