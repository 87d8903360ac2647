"""Fleet incidents in the notifier: one notification for the members of an incident instead of one
each (streaming/detect/README.md, "Fleet incidents").

- Planning: the firing of an alert that could join an incident (its cluster is known and it is in
  an evidence domain) waits `incidents.notify_wait_ms` at a receiver that takes incidents (webhook,
  Slack), so that the members reaching the outbox meanwhile are due together.
- Sending: the due firings of one receiver that are members of one incident go as one unit: one
  request (`Receiver.incident_request`) listing them, recorded as one (delivered together, or
  retried together), exactly as a Slack group is. A member whose firing is due after the others
  were sent (a late joiner) goes as an incident notification of its own, listing every member.
- Resolutions are untouched: each member's resolve is delivered as before, in order after its
  firing (the queue's FIFO per subject and rule), so nothing is lost and nothing reordered.
PagerDuty and Alertmanager keep one notification per alert: PagerDuty resolves by the dedup key of
what it triggered, and Alertmanager groups by its own labels.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from sqlalchemy import Engine

from streaming.alert import Alert
from streaming.config import FleetwatchConfig
from streaming.detect import ClusterPlace, Domain, FleetIncident, alert_domains, cluster_key, evidence
from streaming.notify.receivers import OutgoingAlert, Receiver
from streaming.store import IncidentScope, QueuedDelivery, fleet_incidents, fleet_places, grouping_rules

__all__ = ["MAX_MEMBERS_PER_MESSAGE", "IncidentUnits"]

# The most members one notification carries; a bigger incident goes in several.
MAX_MEMBERS_PER_MESSAGE = 100
# How long the fleet's places (brokers' racks and addresses) are reused before they are read again.
PLACES_TTL_MS = 30_000


class IncidentUnits:
    def __init__(self, engine: Engine, config: FleetwatchConfig, now_ms: Callable[[], int]) -> None:
        self.engine = engine
        scope = IncidentScope.of(config)
        self.settings, self.configured = scope.settings, scope.configured
        self.now_ms = now_ms
        self._places: dict[str, ClusterPlace] = {}
        self._strong: set[Domain] = set()
        self._read_at: int | None = None

    def places(self) -> dict[str, ClusterPlace]:
        now = self.now_ms()
        if self._read_at is None or now - self._read_at >= PLACES_TTL_MS:
            self._places = fleet_places(self.engine, self.configured)
            self._strong = set(evidence(self._places, grouping_rules(self.settings)))
            self._read_at = now
        return self._places

    def may_join(self, alert: Alert) -> bool:
        """Whether the alert could be a member of an incident: its cluster is known and it is in an
        evidence domain (else no grouping needs to be read for it)."""
        places = self.places()
        key = cluster_key(alert, places)
        return key is not None and bool(alert_domains(alert, places.get(key)) & self._strong)

    def wait_ms(self, alert: Alert) -> int:
        """How long the planner holds this alert's firing for its incident (0: it can join none)."""
        if not self.settings.enabled or not self.settings.notify_wait_ms or alert.status == "resolved":
            return 0
        return self.settings.notify_wait_ms if self.may_join(alert) else 0

    def units(self, receiver: Receiver, rows: Sequence[QueuedDelivery],
              alerts: Mapping[int, object]) -> tuple[list[tuple[FleetIncident, list[QueuedDelivery]]],
                                                     list[QueuedDelivery]]:
        """The due firings of `rows` that are members of an incident, one unit per incident (at most
        MAX_MEMBERS_PER_MESSAGE each), and the rows left to send as before."""
        firing = {r.id: a.alert for r in rows
                  if r.status == "firing" and isinstance(a := alerts.get(r.id), OutgoingAlert)}
        if not (self.settings.enabled and receiver.accepts_incidents and any(map(self.may_join, firing.values()))):
            return [], list(rows)
        since = min(a.starts_at for a in firing.values()) - self.settings.window_ms
        member_of = {m.alert_id: incident for incident in fleet_incidents(
            self.engine, self.settings, since, self.configured, self.places()) for m in incident.members}
        grouped: dict[str, list[QueuedDelivery]] = {}
        rest = []
        for row in rows:
            incident = member_of.get(row.alert_id) if row.id in firing else None
            if incident is None:
                rest.append(row)
            else:
                grouped.setdefault(incident.incident_id, []).append(row)
        by_id = {i.incident_id: i for i in member_of.values()}
        return [(by_id[key], group[i:i + MAX_MEMBERS_PER_MESSAGE]) for key, group in grouped.items()
                for i in range(0, len(group), MAX_MEMBERS_PER_MESSAGE)], rest
