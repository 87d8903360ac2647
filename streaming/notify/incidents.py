"""Fleet incidents in the notifier: one notification for the members of an incident instead of one
each (streaming/detect/README.md, "Fleet incidents"), at every receiver type.

- Planning: the firing of an alert that could join an incident (its cluster is known and it is in
  an evidence domain) waits `incidents.notify_wait_ms` at a receiver that takes incidents (all four
  types), so that the members reaching the outbox meanwhile are due together.
- Sending: the due firings of one receiver that are members of one incident go as one unit: one
  request (`Receiver.incident_request`) listing them, recorded as one (delivered together, or
  retried together), exactly as a Slack group is, and recorded with the incident it went under
  (`deliveries.incident_id`, `incident_domain`). A member whose firing is due after the others
  were sent (a late joiner) goes as an incident notification of its own, listing every member.
  Webhook: a `fleetwatch.incident/v1` object; Slack: one message; PagerDuty: one `trigger` with the
  incident's dedup key (pagerduty_events.py); Alertmanager: the members with the labels
  `fleet_incident` and `failure_domain` (its route `group_by: [fleet_incident]` makes them one
  notification: deploy/alertmanager/alertmanager.yml).
- Resolutions keep their order (the queue's FIFO per subject and rule: after their firing) and are
  each delivered. Webhook and Slack get them as before. Where the incident is part of the alert's
  identity (`names_incidents`) a resolution carries the incident its firing went under, read from
  the store (`tagged`): Alertmanager's resolve and refreshes keep the labels it fired with. At
  PagerDuty (`resolves_incidents`) a member's resolve is about the incident (`MemberResolved`): an
  update naming it while others sent under the incident still fire, the incident's `resolve` once
  none does; such a resolve waits a pass when a firing of its incident is being sent in the same
  batch (it must not close the incident before that firing lands). A firing that went on its own
  (before its incident formed, or in none) resolves on its own, by its own identity.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from streaming.config import FleetwatchConfig
from streaming.detect import ClusterPlace, Domain, FleetIncident, alert_domains, cluster_key, evidence
from streaming.notify.receivers import IncidentNotice, IncidentTag, MemberResolved, OutgoingAlert, Receiver
from streaming.records.alert import Alert
from streaming.store import (
    DeliveryQueue,
    IncidentScope,
    NotAnAlert,
    QueuedDelivery,
    fleet_incidents,
    fleet_places,
    grouping_rules,
)

__all__ = ["MAX_MEMBERS_PER_MESSAGE", "IncidentUnits", "tag_of"]

# The most members one notification carries; a bigger incident goes in several.
MAX_MEMBERS_PER_MESSAGE = 100
# How long the fleet's places (brokers' racks and addresses) are reused before they are read again.
PLACES_TTL_MS = 30_000


def tag_of(notice: IncidentNotice | None) -> tuple[str, str] | None:
    """(incident_id, domain) that a unit's deliveries are recorded under, None for a plain unit."""
    if notice is None:
        return None
    tag = notice.tag if isinstance(notice, MemberResolved) else IncidentTag.of(notice)
    return tag.incident_id, tag.domain


class IncidentUnits:
    def __init__(self, queue: DeliveryQueue, config: FleetwatchConfig, now_ms: Callable[[], int]) -> None:
        self.queue = queue
        self.engine = queue.store.engine
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

    def tagged(self, receiver: Receiver, rows: Sequence[QueuedDelivery],
               alerts: Mapping[int, object]) -> dict[int, object]:
        """`alerts` (delivery id -> OutgoingAlert), each resolution with the incident its firing was
        delivered under, at a receiver whose alert identity names it (from the store: a restarted
        notifier resolves what its predecessor sent)."""
        out = dict(alerts)
        resolving = [r for r in rows if r.status == "resolved" and isinstance(alerts.get(r.id), OutgoingAlert)]
        if not (receiver.names_incidents and resolving):
            return out
        tags = self.queue.incident_tags(receiver.name, [r.alert_id for r in resolving])
        for row in resolving:
            if row.alert_id in tags:
                out[row.id] = replace(alerts[row.id], incident=IncidentTag(*tags[row.alert_id]))
        return out

    def open_firings(self, receiver: str, incident_id: str | None = None) -> list[OutgoingAlert]:
        """The firings delivered to `receiver` whose alert still fires, each with the incident it went
        under; with `incident_id`, those that went under it. One whose body this version cannot read
        (a rule it does not know) is left out: it cannot be told again."""
        return [OutgoingAlert(r.alert, r.stored, r.incident_id and IncidentTag(r.incident_id, r.incident_domain or ""))
                for r in self.queue.open_firings(receiver, incident_id) if not isinstance(r.alert, NotAnAlert)]

    def units(self, receiver: Receiver, rows: Sequence[QueuedDelivery], alerts: Mapping[int, object]
              ) -> tuple[list[tuple[IncidentNotice, list[QueuedDelivery]]], list[QueuedDelivery]]:
        """The units that tell of incidents (their due firings, one unit per incident of at most
        MAX_MEMBERS_PER_MESSAGE; at PagerDuty each member's resolve too), and the rows left to send
        as before. A PagerDuty resolve of an incident whose firing is in this batch is in neither."""
        firing, rest = self._firing_units(receiver, rows, alerts)
        units: list[tuple[IncidentNotice, list[QueuedDelivery]]] = list(firing)
        if not receiver.resolves_incidents:
            return units, rest
        sending = {incident.incident_id for incident, _ in firing}
        still: dict[str, tuple[Alert, ...]] = {}  # incident id -> what still fires under it (read once)
        left = []
        for row in rest:
            item = alerts.get(row.id)
            tag = item.incident if isinstance(item, OutgoingAlert) and row.status == "resolved" else None
            if tag is None:
                left.append(row)
            elif tag.incident_id not in sending:
                if tag.incident_id not in still:
                    still[tag.incident_id] = tuple(
                        open_.alert for open_ in self.open_firings(receiver.name, tag.incident_id))
                units.append((MemberResolved(tag, still[tag.incident_id]), [row]))
        return units, left

    def _firing_units(self, receiver: Receiver, rows: Sequence[QueuedDelivery], alerts: Mapping[int, object]
                      ) -> tuple[list[tuple[FleetIncident, list[QueuedDelivery]]], list[QueuedDelivery]]:
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
