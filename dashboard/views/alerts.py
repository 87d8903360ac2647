"""Alert tables (the alerts page, a cluster's page, the identity page), with silence buttons."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dash import html

from dashboard.views.elements import Href, named_cluster, runbook_link, table_or_empty
from dashboard.views.formatting import format_age, format_ts

__all__ = ["alerts_table"]


def _silence_cell(alert: dict[str, Any], silenced: Mapping[str, int]) -> html.Td:
    if alert["status"] != "firing":
        return html.Td("")
    until = silenced.get(alert["alert_id"])
    if until is not None:
        return html.Td(f"silenced until {format_ts(until)}", className="silenced")
    return html.Td(html.Button("silence 2 h", id={"type": "silence", "alert": alert["alert_id"]}, n_clicks=0,
                               className="silence-btn", title="silence its cluster, rule and broker for 2 h"))


def _name(alert: dict[str, Any]) -> str | None:
    """The name beside the alert's cluster id: the one it fired with, else its target. Not a misroute's:
    its cluster is the one that answered, its name the target that was misrouted (the Target column)."""
    if alert["rule"] == "connection.misrouted":
        return None
    return alert.get("cluster_name") or alert["target"]


def _broker(alert: dict[str, Any]) -> list[Any] | str:
    if alert["broker_id"] is None:
        return "—"
    where = " · ".join(p for p in (alert.get("broker_host"), alert.get("rack") and f"rack {alert['rack']}") if p)
    return [str(alert["broker_id"]), *([html.Span(where, className="broker-place mono")] if where else [])]


def alerts_table(href: Href, rows: list[dict[str, Any]], clock_ms: int | None, *,
                 table_id: str, limit: int, silenced: Mapping[str, int] | None = None) -> html.Div:
    """Alerts, each linking to the page of the cluster it is attributed to (its name first, the id
    second) and to its rule's runbook; a broker with the address and rack it fired with.

    With `silenced` (alert id -> end of the silence that covers it), firing alerts get a
    "silence" button, or say until when they are silenced.
    """
    body = []
    for a in rows:
        since = None if clock_ms is None else clock_ms - a["starts_at"]
        ended = format_ts(a["ends_at"]) if a["ends_at"] is not None else f"firing for {format_age(since)}"
        body.append(html.Tr(
            [html.Td(a["severity"]), html.Td([html.Span(a["rule"], className="mono"), runbook_link(href, a["rule"])],
                                             className="rule"),
             html.Td(named_cluster(href, a["cluster_id"], _name(a)), className="cluster"),
             html.Td(a["target"] or "—"), html.Td(_broker(a), className="broker"),
             html.Td(a["endpoint"] or "—", className="mono"), html.Td(format_ts(a["starts_at"])),
             html.Td(ended), html.Td(a["summary"]), *([] if silenced is None else [_silence_cell(a, silenced)])],
            className=f"alert-row sev-{a['severity'] if a['status'] == 'firing' else 'healthy'}",
            **{"data-alert": a["alert_id"]}))
    head = ["Severity", "Rule", "Cluster", "Target", "Broker", "Endpoint", "Started", "Ended", "Summary",
            *([] if silenced is None else ["Silence"])]
    table = table_or_empty(head, body, "None.")
    note = ([html.P(f"Showing the first {limit}; narrow the filters to see others.", className="muted")]
            if len(rows) >= limit else [])
    return html.Div([table, *note], id=table_id)
