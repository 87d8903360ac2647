"""An alert in words, as the receivers' messages say it (Slack's text, PagerDuty's summaries)."""

from __future__ import annotations

from streaming.records.alert import SEVERITIES, Alert

__all__ = ["headline", "impact_text", "where", "worst_severity"]


def where(alert: Alert) -> str:
    """Human words for the subject, the cluster's name first: `payments-eu1 (MkU3…) broker 3`."""
    parts = []
    if alert.cluster_name or alert.target:
        parts.append(str(alert.cluster_name or alert.target))
    if alert.cluster_id:
        parts.append(f"({alert.cluster_id})" if parts else f"cluster {alert.cluster_id}")
    if alert.broker_id is not None:
        parts.append(f"broker {alert.broker_id}")
    if alert.endpoint:
        parts.append(f"endpoint {alert.endpoint}")
    return " ".join(parts) or "fleet"


def headline(alert: Alert) -> str:
    """The alert in one line. A named alert's summary says the cluster and the broker by name (issue 43):
    it comes first, the ids after it (`payments-eu1: broker 3 (b3.pay:9092, rack a) has sent no heartbeat
    for 9 s (cluster MkU3…)`); an alert without names says where it is, then its summary."""
    summary = str(alert.summary or "")
    if not alert.cluster_name:
        return f"{where(alert)}: {summary}"
    if not summary.startswith(f"{alert.cluster_name}: "):
        summary = f"{alert.cluster_name}: {summary}"
    ids = [f"cluster {alert.cluster_id}"] if alert.cluster_id else []
    if alert.endpoint and alert.endpoint not in summary:
        ids.append(f"endpoint {alert.endpoint}")
    return summary + (f" ({', '.join(ids)})" if ids else "")


def impact_text(alert: Alert) -> str | None:
    """A broker incident's blast radius in words (issue 30, `details.impact`), None without one:
    `leads 4 partitions, 12 replicas; 0 offline, 12 under min ISR (top: orders 4 led, 12 under min ISR)`."""
    impact = (alert.details or {}).get("impact")
    if not isinstance(impact, dict):
        return None
    top = ", ".join(f"{t['topic']} {t['led']} led, {t['under_min_isr']} under min ISR, {t['offline']} offline"
                    for t in impact.get("top_topics", [])[:3])
    partial = "" if impact.get("complete", True) else " (partial layout)"
    return (f"leads {impact['partitions_led']} partitions, {impact['replicas_held']} replicas; "
            f"{impact['partitions_offline']} offline, {impact['partitions_under_min_isr']} under min ISR"
            f"{partial}" + (f" (top: {top})" if top else ""))


def worst_severity(alerts: list[Alert]) -> str:
    """The gravest of the alerts' severities (critical, warning, info); "error" for none known
    (PagerDuty knows our three by the same names, and "error" besides)."""
    known = [SEVERITIES.index(a.severity) for a in alerts if a.severity in SEVERITIES]
    return SEVERITIES[min(known)] if known else "error"
