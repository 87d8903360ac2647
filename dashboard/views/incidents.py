"""The incidents page: one block per fleet incident (its shared domain, clusters, start and end),
with its member alerts, each linking to its cluster's page."""

from __future__ import annotations

from typing import Any

from dash import html

from dashboard.views.elements import Href, named_cluster, runbook_link, table_or_empty
from dashboard.views.formatting import format_age, format_ts

__all__ = ["incidents_view"]


def incidents_view(href: Href, rows: list[dict[str, Any]], clock_ms: int | None) -> html.Div:
    if not rows:
        return html.Div("No fleet incident: no alerts of several clusters sharing a failure domain.", className="empty")
    blocks = []
    for row in rows:
        since = None if clock_ms is None else clock_ms - row["starts_at"]
        ended = format_ts(row["ends_at"]) if row["ends_at"] is not None else f"open for {format_age(since)}"
        members = [html.Tr([html.Td(m["severity"]),
                            html.Td([html.Span(m["rule"], className="mono"), runbook_link(href, m["rule"])]),
                            html.Td(named_cluster(href, m["cluster_id"], m["cluster_name"] or m["target"]),
                                    className="cluster"),
                            html.Td("—" if m["broker_id"] is None else m["broker_id"]),
                            html.Td(format_ts(m["starts_at"])),
                            html.Td(format_ts(m["ends_at"]) if m["ends_at"] is not None else "firing")])
                   for m in row["members"]]
        names = sorted({m["cluster_name"] or m["target"] or m["cluster_id"] or "?" for m in row["members"]})
        blocks.append(html.Div([
            html.H2(f"{row['domain']}: {len(row['clusters'])} clusters, {len(row['members'])} alerts"),
            html.P(", ".join(names), className="incident-clusters"),
            html.P(f"{row['status']} · started {format_ts(row['starts_at'])} · {ended} · incident "
                   f"{row['incident_id']}", className="muted"),
            table_or_empty(["Severity", "Rule", "Cluster", "Broker", "Started", "Ended"], members, "None."),
        ], className=f"panel incident sev-{'critical' if row['status'] == 'firing' else 'healthy'}",
            **{"data-incident": row["incident_id"]}))
    return html.Div(blocks)
