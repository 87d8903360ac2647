"""The events the `pagerduty` receiver sends (Events API v2), as plain dicts.

- An alert on its own: `trigger`, then `resolve`, with `dedup_key` = its alert_id; one that escalates
  another (`details.escalates`: a `broker.heartbeat_lost` of a broker whose `broker.stalled` was open,
  streaming/detect/README.md) with that alert's id instead: PagerDuty raises the open alert's severity
  rather than paging a second time, and both resolve at the same heartbeat (`dedup_key`).
- A fleet incident (streaming/notify/incidents.py) is ONE PagerDuty alert, `dedup_key` =
  `fleet-incident:<incident_id>` (`incident_dedup_key`). Its first notification is a `trigger` whose
  summary names the shared domain and the number of clusters, its `custom_details` listing every
  member (rule, cluster, subject, started, status, blast radius where it has one) and, under `new`,
  the members it is the first to tell. A late joiner's is a `trigger` with the same key: PagerDuty
  adds it to the open alert's log (no second page). A member's resolve while others sent under that
  key still fire is a `trigger` with the same key naming the member resolved and those still
  firing (a log entry, not a page); the resolve of the last is `resolve` for the key.
- Every trigger carries `links` (issue 43): the runbook of its rule (of each member's rule) and its
  page on the dashboard (the alert's, the incident's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from streaming.detect import FleetIncident
from streaming.notify.links import Links
from streaming.notify.wording import headline, impact_text, where, worst_severity
from streaming.plumbing.clock import iso_ms
from streaming.records.alert import Alert

__all__ = ["alert_event", "dedup_key", "incident_dedup_key", "incident_trigger", "member_resolved"]

SUMMARY_MAX = 1024  # PagerDuty's limit on payload.summary


def incident_dedup_key(incident_id: str) -> str:
    return f"fleet-incident:{incident_id}"


def dedup_key(alert: Alert) -> str:
    """The PagerDuty alert an alert on its own is: its id, or the id of the alert it escalates (one
    incident: the stall's warning raised to the page)."""
    escalates = alert.details.get("escalates")
    return escalates if isinstance(escalates, str) and escalates else alert.alert_id


def _trigger(routing_key: str, key: str, payload: dict[str, Any], links: list[dict[str, str]]) -> dict[str, Any]:
    payload = {k: v for k, v in payload.items() if v is not None}
    payload["summary"] = payload["summary"][:SUMMARY_MAX]
    return {"routing_key": routing_key, "dedup_key": key, "event_action": "trigger", "payload": payload,
            "client": "fleetwatch", "links": links}


def _runbooks(rules: Sequence[str], links: Links) -> list[dict[str, str]]:
    return [{"href": links.runbook(rule), "text": f"Runbook: {rule}"} for rule in dict.fromkeys(rules)]


def _broker(alert: Alert) -> str | None:
    if alert.broker_id is None:
        return None
    return f"broker {alert.broker_id}" + (f" ({alert.broker_host})" if alert.broker_host else "")


def alert_event(alert: Alert, routing_key: str, links: Links, stored: Mapping[str, Any] | None = None
                ) -> dict[str, Any]:
    """One alert's trigger or resolve (`dedup_key`). `stored`: the alert object as the store holds it (an
    older job's has no names), for the custom details; else the alert's own."""
    if alert.status == "resolved":
        return {"routing_key": routing_key, "dedup_key": dedup_key(alert), "event_action": "resolve"}
    return _trigger(routing_key, dedup_key(alert), {
        "summary": f"[{alert.rule}] {headline(alert)}",
        "source": alert.cluster_name or alert.target or alert.cluster_id or alert.endpoint or "fleetwatch",
        "severity": worst_severity([alert]),
        "timestamp": iso_ms(alert.starts_at),
        "component": _broker(alert) or alert.endpoint or None,
        "group": alert.cluster_id,
        "class": alert.rule,
        # The alert object, keys in the stored body's order (sorted); a broker incident's blast
        # radius in words beside it (its numbers are in details.impact).
        "custom_details": dict(sorted((alert.to_dict() if stored is None else stored).items()))
        | ({"blast_radius": text} if (text := impact_text(alert)) else {})},
        [*_runbooks([alert.rule], links), {"href": links.alert_page(alert.alert_id), "text": "Alert on the dashboard"}])


def _member(alert: Alert) -> dict[str, Any]:
    """One member as an incident's custom details list it."""
    out = {"alert_id": alert.alert_id, "rule": alert.rule, "severity": alert.severity, "status": alert.status,
           "cluster": alert.cluster_id or alert.target, "cluster_name": alert.cluster_name, "subject": where(alert),
           "started": iso_ms(alert.starts_at)}
    return out | ({"blast_radius": text} if (text := impact_text(alert)) else {})


def _domain_words(domain: str) -> str:
    kind, _, value = domain.partition(":")
    return f"{kind} {value}"


def _incident_links(incident_id: str, rules: Sequence[str], links: Links) -> list[dict[str, str]]:
    return [{"href": links.incident_page(incident_id), "text": "Fleet incident on the dashboard"},
            *_runbooks(rules, links)]


def incident_trigger(incident: FleetIncident, new: Sequence[Alert], routing_key: str, links: Links) -> dict[str, Any]:
    """The trigger of a fleet incident's notification telling the members `new`."""
    members = list(incident.members)
    firing = [m for m in members if m.status == "firing"]
    rules = ", ".join(dict.fromkeys(m.rule for m in members))
    domain = str(incident.domain)
    return _trigger(routing_key, incident_dedup_key(incident.incident_id), {
        "summary": f"Fleet incident: {len(incident.clusters)} clusters share {_domain_words(domain)} "
                   f"({len(members)} alerts: {rules})",
        "source": domain,
        "severity": worst_severity(firing or list(new)),
        "timestamp": iso_ms(incident.starts_at),
        "group": domain,
        "class": "fleet_incident",
        "custom_details": {"incident_id": incident.incident_id, "domain": domain, "clusters": list(incident.clusters),
                           "firing": len(firing), "new": [a.alert_id for a in new],
                           "members": [_member(m) for m in members]}},
        _incident_links(incident.incident_id, [m.rule for m in members], links))


def member_resolved(incident_id: str, domain: str, resolved: Alert, still_firing: Sequence[Alert],
                    routing_key: str, links: Links) -> dict[str, Any]:
    """A member's resolve: `resolve` for the incident once nothing sent under its key still fires,
    else a `trigger` update saying which member resolved and which still fire."""
    key = incident_dedup_key(incident_id)
    if not still_firing:
        return {"routing_key": routing_key, "dedup_key": key, "event_action": "resolve"}
    clusters = sorted({str(a.cluster_id or a.target) for a in still_firing})
    return _trigger(routing_key, key, {
        "summary": f"Fleet incident ({_domain_words(domain)}): [{resolved.rule}] {where(resolved)} resolved; "
                   f"{len(still_firing)} alerts of {len(clusters)} clusters still fire",
        "source": domain,
        "severity": worst_severity(list(still_firing)),
        "timestamp": iso_ms(resolved.ends_at or resolved.starts_at),
        "group": domain,
        "class": "fleet_incident",
        "custom_details": {"incident_id": incident_id, "domain": domain, "resolved": _member(resolved),
                           "firing": len(still_firing), "still_firing": [_member(a) for a in still_firing]}},
        _incident_links(incident_id, [a.rule for a in still_firing], links))
