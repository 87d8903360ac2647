"""Which receivers an alert goes to (`alerting.routes`, SPEC section 6).

Every route whose `match` holds sends the alert to its receiver (a critical alert goes to
both `pager` and the catch-all `ops` of the SPEC example). A route matches when, for every
field it names, the alert's value is one of the listed ones (shell-style patterns such as
`broker.*` allowed). Fields are the alert's own (`rule`, `severity`, `status`, `cluster_id`,
`target`, `broker_id`, `endpoint`, …) or, failing that, the tags of the configured cluster
the alert is about (`env: [prod]`); any other key is a configuration error (`streaming/config/`,
ROUTE_FIELDS). Without any route, every receiver gets every alert. Where a resolution goes
besides (wherever its firing went): `streaming/notify/planning.py`, `Planner.plan`.
"""

from __future__ import annotations

from collections.abc import Sequence
from fnmatch import fnmatchcase
from typing import Any

from streaming.config import ClusterConfig, Route
from streaming.records.alert import Alert

__all__ = ["Router", "group_key"]


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class Router:
    def __init__(self, routes: Sequence[Route], receiver_names: Sequence[str],
                 clusters: Sequence[ClusterConfig] = ()) -> None:
        self.routes = list(routes)
        self.receiver_names = list(receiver_names)
        self._tags_by_target = {c.name: dict(c.tags) for c in clusters}
        self._tags_by_id = {c.expected_cluster_id: dict(c.tags) for c in clusters if c.expected_cluster_id}

    def _tags(self, wire: dict[str, Any]) -> dict[str, str]:
        tags = self._tags_by_target.get(wire["target"] or "")
        if tags is None:
            tags = self._tags_by_id.get(wire["cluster_id"] or "", {})
        return tags

    def _value(self, wire: dict[str, Any], field: str) -> str | None:
        if field in wire:
            return _text(wire[field])
        if field == "broker":
            return _text(wire["broker_id"])
        return self._tags(wire).get(field)

    def _matches(self, route: Route, wire: dict[str, Any]) -> bool:
        for field, wanted in route.match.items():
            value = self._value(wire, field)
            if value is None or not any(fnmatchcase(value, pattern) for pattern in wanted):
                return False
        return True

    def receivers_for(self, alert: Alert) -> list[str]:
        """The receivers of an alert, each once, in route order."""
        if not self.routes:
            return list(self.receiver_names)
        wire = alert.to_dict()  # what a route names: the alert object's fields (or the cluster's tags)
        chosen: list[str] = []
        for route in self.routes:
            if route.receiver not in chosen and self._matches(route, wire):
                chosen.append(route.receiver)
        return chosen


def group_key(alert: Alert) -> str:
    """What storm control groups by: the cluster (by id, else by target name, else endpoint)."""
    if alert.cluster_id:
        return f"cluster:{alert.cluster_id}"
    if alert.target:
        return f"target:{alert.target}"
    return f"endpoint:{alert.endpoint}"
