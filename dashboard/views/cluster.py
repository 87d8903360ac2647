"""The cluster page: who the cluster is, its brokers, its controller history and its brokers'
states over time (its alerts: `views.alerts.alerts_table`)."""

from __future__ import annotations

import html as html_text
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from dash import html

from dashboard.queries.shared import STATES
from dashboard.views.elements import cluster_label, table_or_empty
from dashboard.views.formatting import format_age, format_number, format_ts

__all__ = ["blast_radius_table", "brokers_table", "cluster_header", "controller_table", "timeline_figure"]

_STATE_COLOUR = {"ONLINE": "#2e9d4f", "FENCED": "#f0a000", "STOPPING": "#1e6fd9", "OFFLINE": "#8a93a3"}


def cluster_header(cluster_id: str, info: dict[str, Any] | None, n_brokers: int, name: str | None = None) -> html.Div:
    """Who the cluster is, by name first and id second (issue 43): target, controller, last answer.
    `name`: its configured name, else its target's."""
    name = name or (info or {}).get("target")
    title = html.H1([html.Span(name, className="cluster-name"), " ",
                     html.Span(cluster_label(cluster_id), className="cluster-id mono", title="cluster id")]
                    if name else ["Cluster ", html.Span(cluster_label(cluster_id), className="mono")])
    if info is None and not n_brokers:
        return html.Div([title, html.P("The store has no state for this cluster (yet).", className="muted")])
    info = info or {}
    controller = info.get("controller_id")
    facts = [("Target", info.get("target") or "—"),
             ("Active controller", "none" if controller in (None, -1) else str(controller)),
             ("Last response", f"{format_age(info.get('last_response_age_ms'))} ago"),
             ("Brokers", str(n_brokers))]
    return html.Div([title, html.Div([html.Div([html.Span(v, className="n"), html.Span(k, className="label")],
                                               className="card") for k, v in facts], className="strip")])


def _controller_class(change: dict[str, Any]) -> str:
    none = change["controller_id"] in (None, -1)
    # No active controller: critical while it lasts, a warning mark in the history.
    severity = ("sev-critical" if change["current"] else "sev-warning") if none else ""
    return " ".join(filter(None, ["controller-row", "current" if change["current"] else "", severity]))


def controller_table(rows: list[dict[str, Any]]) -> html.Div:
    """The cluster's latest controller changes, newest first (`queries.cluster.controller_changes`)."""
    body = [html.Tr(
        [html.Td(format_ts(c["ts"])),
         html.Td("none" if c["controller_id"] in (None, -1) else str(c["controller_id"]), className="num"),
         html.Td(format_age(c["held_ms"]) + (" so far" if c["current"] else ""), className="num")],
        className=_controller_class(c)) for c in rows]
    return html.Div(table_or_empty(["Changed at", ("Active controller", "num"), ("Held for", "num")], body,
                           "No controller change recorded for this cluster."), id="controller-history")


def brokers_table(rows: list[dict[str, Any]], firing: list[dict[str, Any]]) -> html.Div:
    """The cluster's brokers, each with the rules firing on it."""
    rules_by_broker: dict[int, list[str]] = {}
    for alert in firing:
        if alert["broker_id"] is not None:
            rules_by_broker.setdefault(alert["broker_id"], []).append(alert["rule"])
    body = []
    for b in rows:
        fenced = {True: "yes", False: "no"}.get(b["fenced"], "—")
        on_fire = rules_by_broker.get(b["broker_id"], [])
        # `firing` comes worst first, so the first alert of a broker is its worst.
        worst = next((a["severity"] for a in firing if a["broker_id"] == b["broker_id"]), "healthy")
        body.append(html.Tr(
            [html.Td(b["broker_id"], className="num"), html.Td(b["state"] or "—"), html.Td(fenced),
             html.Td(format_number(b["broker_epoch"]), className="num"),
             html.Td(format_age(b["heartbeat_age_ms"]), className="num"),
             html.Td(format_age(b["answer_age_ms"]), className="num"),
             html.Td(", ".join(b["endpoints"] or []), className="mono"), html.Td(b["rack"] or "—"),
             html.Td(", ".join(on_fire))],
            className=f"broker-row sev-{worst}"))
    head = [("Broker", "num"), "State", "Fenced", ("Epoch", "num"), ("Last heartbeat", "num"),
            ("Last answered", "num"), "Endpoints", "Rack", "Firing"]
    return table_or_empty(head, body, "No broker of this cluster has been seen.")


def blast_radius_table(rows: list[dict[str, Any]]) -> html.Div:
    """What each firing broker incident does to the cluster's partitions (`queries.cluster.blast_radius`)."""
    body = []
    for r in rows:
        i = r["impact"]
        top = ", ".join(f"{t['topic']} ({t['led']} led, {t['under_min_isr']} under min ISR, {t['offline']} offline)"
                        for t in i.get("top_topics", []))
        body.append(html.Tr(
            [html.Td(r["broker_id"], className="num"), html.Td(r["rule"]), html.Td(format_ts(r["starts_at"])),
             *(html.Td(format_number(i.get(k)), className="num") for k in
               ("partitions_led", "replicas_held", "partitions_offline", "partitions_under_min_isr")),
             html.Td(top or "—"), html.Td("" if i.get("complete", True) else "partial layout")],
            className=f"impact-row sev-{r['severity']}"))
    head = [("Broker", "num"), "Incident", "Since", ("Led", "num"), ("Replicas", "num"), ("Offline", "num"),
            ("Under min ISR", "num"), "Top topics", ""]
    return html.Div(table_or_empty(head, body, "No firing broker incident, or no partition layout read."),
                    id="blast-radius")


def timeline_figure(segments: pd.DataFrame, cluster_id: str) -> go.Figure:
    """Per-broker state over time: one horizontal bar per state segment."""
    fig = go.Figure()
    for state in sorted(segments["state"].unique(), key=lambda s: (s not in STATES, s)):
        part = segments[segments["state"] == state]
        start = pd.to_datetime(part["start_ms"], unit="ms", utc=True)
        # Plotly would interpret tags in reasons (untrusted text): escape them.
        hover = [html_text.escape(f"broker {b}: {state} since {format_ts(s)} ({r or 'no reason'})")
                 for b, s, r in zip(part["broker_id"], part["start_ms"], part["reason"], strict=True)]
        fig.add_trace(go.Bar(
            name=html_text.escape(state), orientation="h", y=[f"broker {b}" for b in part["broker_id"]],
            base=start, x=(part["end_ms"] - part["start_ms"]).to_list(),
            marker_color=_STATE_COLOUR.get(state, "#b0b7c3"), hovertext=hover, hoverinfo="text"))
    fig.update_layout(
        barmode="overlay", height=120 + 28 * max(segments["broker_id"].nunique(), 1),
        margin={"l": 80, "r": 20, "t": 30, "b": 40}, xaxis={"type": "date", "title": "event time (UTC)"},
        yaxis={"categoryorder": "category descending"}, legend={"orientation": "h", "y": 1.1},
        # Transparent: the page's panel colour shows through, light or dark.
        paper_bgcolor="rgba(0,0,0,0)", plot_bgcolor="rgba(0,0,0,0)",
        # Keep the user's zoom across live refreshes of the same cluster.
        uirevision=cluster_id)
    if segments.empty:
        fig.add_annotation(text="No state transition recorded for this cluster.", showarrow=False,
                           xref="paper", yref="paper", x=0.5, y=0.5)
    return fig
