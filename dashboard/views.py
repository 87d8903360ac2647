"""Page pieces: plain functions from query rows to Dash components.

Everything that comes from events (cluster ids, target names, hosts, reasons, summaries) is
untrusted. It only ever becomes the text child of an html component, which React renders as a
text node; strings that go into a plotly figure, which understands a little HTML, are escaped.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import html as html_text
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

import numpy as np
import orjson
import pandas as pd
import plotly.graph_objects as go
from dash import dcc, html
from plotly.subplots import make_subplots

from dashboard.queries import SEVERITIES, STATES
from streaming.redact import redact_text

__all__ = [
    "DELIVERY_STATES",
    "HEALTHY_LIST_LIMIT",
    "LISTED_LIMIT",
    "MAP_STATES",
    "Href",
    "alerts_table",
    "brokers_table",
    "cluster_header",
    "cluster_path",
    "collisions_table",
    "controller_table",
    "deliveries_table",
    "delivery_summary",
    "fleet_map",
    "fleet_table",
    "format_age",
    "format_ts",
    "misrouted_table",
    "pipeline_figure",
    "pipeline_tables",
    "registry_table",
    "summary_strip",
    "tag_text",
    "tile_state",
    "timeline_figure",
]

# Maps an app-relative path ("/alerts") to the href to render (honours a URL prefix).
Href = Callable[[str], str]

# More healthy clusters than this collapse into one count line unless asked for.
HEALTHY_LIST_LIMIT = 20
# Asked for, at most this many healthy rows (a refresh of 1,000 rows every 2 s is ~1.4 MB).
LISTED_LIMIT = 200
# Up to this many clusters, fleet map tiles carry their name; more are plain squares.
LABELLED_TILES_LIMIT = 120

_STATE_LABEL = {"ONLINE": "online", "FENCED": "fenced", "STOPPING": "stopping", "OFFLINE": "offline",
                "UNKNOWN": "no state"}
_STATE_COLOUR = {"ONLINE": "#2e9d4f", "FENCED": "#f0a000", "STOPPING": "#1e6fd9", "OFFLINE": "#8a93a3"}


def format_age(ms: float | None) -> str:
    """An age or duration for humans: "2.1 s", "4.0 min", "3.2 h", "1.5 d"."""
    if pd.isna(ms):
        return "—"
    seconds = max(float(ms), 0.0) / 1000
    for limit, unit, size in ((60, "s", 1), (3600, "min", 60), (86400, "h", 3600)):
        if seconds < limit:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds / 86400:.1f} d"


def format_ts(ms: int | None) -> str:
    """Epoch milliseconds as a UTC time ("2025-11-22 08:26:40Z")."""
    if ms is None:
        return "—"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _watermark(ms: int | None) -> int | None:
    """A recorded watermark, None before the first one: Spark reports the epoch (0) until then."""
    return ms if ms is not None and ms > 0 else None


def _number(value: float | None, digits: int = 0) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def cluster_path(cluster_id: str) -> str:
    """The cluster page's app-relative path; any character of an id survives the round trip."""
    return "/cluster/" + quote(cluster_id, safe="")


def _cluster_label(cluster_id: str) -> str:
    # Brokers heard of before their cluster wrote its ClusterIdRecord are stored under "".
    return cluster_id or "(no cluster id)"


def _cluster_link(href: Href, cluster_id: str) -> dcc.Link:
    return dcc.Link(_cluster_label(cluster_id), href=href(cluster_path(cluster_id)),
                    className="cluster-link mono")


def _table(head: Sequence[str | tuple[str, str]], rows: Sequence[html.Tr | dict[str, Any]], empty: str) -> html.Div:
    if not rows:
        return html.Div(empty, className="empty")
    cells = [html.Th(h) if isinstance(h, str) else html.Th(h[0], className=h[1]) for h in head]
    return html.Table([html.Thead(html.Tr(cells)), html.Tbody(rows)])


def _card(n: int, label: str, kind: str = "") -> html.Div:
    return html.Div([html.Span(f"{n:,}", className="n"), html.Span(label, className="label")],
                    className=f"card {kind}".strip())


def summary_strip(summary: dict[str, Any]) -> html.Div:
    """Clusters, brokers by state and firing alerts by severity."""
    brokers: dict[str, int] = summary["brokers"]
    firing: dict[str, int] = summary["firing"]
    cards = [_card(summary["clusters"], "clusters"), _card(sum(brokers.values()), "brokers")]
    cards += [_card(brokers[s], _STATE_LABEL[s]) for s in (*STATES, "UNKNOWN") if brokers.get(s)]
    cards += [_card(firing.get(s, 0), f"{s} firing", s if firing.get(s) else "healthy")
              for s in SEVERITIES]
    return html.Div(cards, className="strip", id="summary")


def tag_text(tags: Mapping[str, str] | None) -> str:
    """A target's tags as one line: "env=prod region=eu-west-1"."""
    return " ".join(f"{k}={v}" for k, v in sorted((tags or {}).items()))


def _element(tag: str, children: Any = None, *, namespace: str = "dash_html_components",
             **props: Any) -> dict[str, Any]:
    """An element written as the JSON Dash sends for it (`_element("Td", x, className="num")`
    is what `html.Td(x, className="num")` serialises to).

    For the views that build hundreds or thousands of elements on every refresh, the fleet map
    and the clusters table (a region outage puts 1,000 clusters in it): Dash's component classes
    cost ~25 us per element to build and serialise, this ~1.5 us. The page is the same.
    """
    if children is not None:
        props["children"] = children
    return {"type": tag, "namespace": namespace, "props": props}


def _cluster_row(href: Href, row: dict[str, Any], tags: Mapping[str, Mapping[str, str]] | None) -> dict[str, Any]:
    severity = row["severity"] or "healthy"
    cluster_id = row["cluster_id"]
    link = _element("Link", _cluster_label(cluster_id), namespace="dash_core_components",
                    href=href(cluster_path(cluster_id)), className="cluster-link mono")
    counts = [_element("Td", row[k] or "", className="num") for k in ("online", "fenced", "stopping",
                                                                       "offline", "unknown")]
    tag_cell = [] if tags is None else [_element("Td", tag_text(tags.get(row["target"] or "")), className="tags")]
    return _element("Tr", [
        _element("Td", link), _element("Td", row["target"] or "—"), *tag_cell,
        _element("Td", row["brokers"], className="num"), *counts,
        _element("Td", row["firing"] or "", className="num"), _element("Td", row["severity"] or "healthy"),
        _element("Td", format_age(row["stalest_heartbeat_age_ms"]), className="num")],
        className=f"cluster-row sev-{severity}", **{"data-cluster": cluster_id})


def fleet_table(href: Href, rows: list[dict[str, Any]], show_healthy: bool,
                tags: Mapping[str, Mapping[str, str]] | None = None) -> html.Div:
    """Clusters with firing alerts one per row; healthy ones collapse into a count when many.

    With `tags` (target name -> tags), a column shows each cluster's target's tags.
    """
    head = ["Cluster", "Target", *([] if tags is None else ["Tags"]), ("Brokers", "num"), ("Online", "num"),
            ("Fenced", "num"), ("Stopping", "num"), ("Offline", "num"), ("No state", "num"), ("Firing", "num"),
            "Worst", ("Stalest heartbeat", "num")]
    troubled = [r for r in rows if r["severity"]]
    healthy = [r for r in rows if not r["severity"]]
    body = [_cluster_row(href, r, tags) for r in troubled]
    if show_healthy or len(healthy) <= HEALTHY_LIST_LIMIT:
        body += [_cluster_row(href, r, tags) for r in healthy[:LISTED_LIMIT]]
        if len(healthy) > LISTED_LIMIT:
            body.append(html.Tr(html.Td(f"and {len(healthy) - LISTED_LIMIT:,} more healthy clusters: search or "
                                        "filter by tag to narrow the list", colSpan=len(head)),
                                className="healthy-count", id="healthy-count"))
    else:
        body.append(html.Tr(html.Td(f"{len(healthy):,} healthy clusters (no firing alert): tick "
                                    "\"list healthy clusters\" or search to see them", colSpan=len(head)),
                            className="healthy-count", id="healthy-count"))
    return _table(head, body, "No cluster matches." if rows else "The store holds no cluster yet.")


# A fleet map tile's state, worst first: its worst firing alert's severity; else "degraded" when
# not every broker is ONLINE (or none is known) though no alert fires; else "healthy".
MAP_STATES = ("critical", "warning", "info", "degraded", "healthy")
_MAP_STATE_LABEL = {"critical": "critical", "warning": "warning", "info": "info",
                    "degraded": "not every broker online, no alert", "healthy": "healthy"}
_NOT_ONLINE = (("fenced", "fenced"), ("stopping", "stopping"), ("offline", "offline"), ("unknown", "with no state"))


def tile_state(row: Mapping[str, Any]) -> str:
    """The state of a cluster's tile on the fleet map (MAP_STATES), from its overview row."""
    if row["severity"]:
        return row["severity"]
    return "healthy" if row["brokers"] and row["online"] == row["brokers"] else "degraded"


def _brokers(n: int) -> str:
    return f"{n} broker{'s' if n != 1 else ''}"


def _problem(row: Mapping[str, Any], worst: Mapping[str, Any] | None) -> str:
    """A cluster's worst problem in one line, for its tile's tooltip."""
    more = row["firing"] - 1
    if worst is not None:
        line = f"{worst['severity']}: {worst['rule']}: {worst['summary']}"
        return line + (f" (and {more} more firing)" if more > 0 else "")
    if row["severity"]:  # its alert fired between the two reads
        return f"{row['severity']}: {row['firing']} firing"
    if not row["brokers"]:
        return "no broker seen yet"
    off = [f"{_brokers(row[key])} {label}" for key, label in _NOT_ONLINE if row[key]]
    if off:
        return "no alert firing; " + ", ".join(off)
    return f"healthy: all {_brokers(row['brokers'])} online"


def _tile(href: Href, row: Mapping[str, Any], state: str, problem: str, labelled: bool) -> dict[str, Any]:
    """One tile: a link to the cluster's page, its name and worst problem as its tooltip."""
    cluster_id, name = row["cluster_id"], row["target"] or _cluster_label(row["cluster_id"])
    title = f"{name}\n{cluster_id}\n{problem}" if row["target"] else f"{name}\n{problem}"
    return _element("A", name if labelled else None, href=href(cluster_path(cluster_id)),
                    className=f"tile sev-{state}", title=title)


def _state_counts(states: Sequence[str]) -> dict[str, int]:
    return {s: states.count(s) for s in MAP_STATES}


def _group_head(group_by: str, value: str | None, states: Sequence[str]) -> html.Div:
    name = ("all clusters" if not group_by
            else f"{group_by}={value}" if value is not None else f"no {group_by} tag")
    trouble = [f"{n:,} {s}" for s, n in _state_counts(states).items() if n and s not in ("healthy", "degraded")]
    size = f"{len(states):,} cluster{'s' if len(states) != 1 else ''}"
    return html.Div([html.Span(name, className="group-name"),
                     html.Span(" · ".join([size, *trouble]), className="muted")],
                    className="group-head")


def fleet_map(href: Href, rows: Sequence[Mapping[str, Any]], worst: Mapping[str, Mapping[str, Any]],
              tags: Mapping[str, Mapping[str, str]], group_by: str) -> tuple[html.Div, str]:
    """One tile per cluster, coloured by its worst state (`tile_state`), linking to its page; and
    a digest of the map (same digest, same map).

    Grouped by the value of the `group_by` tag of the cluster's target (groups by value, the
    clusters without that tag last), all in one group when `group_by` is empty. Within a group
    tiles keep their place (by name), whatever their state: the eye finds a cluster where it was.
    `worst` maps a cluster id to its worst firing alert (`queries.worst_alerts`).
    """
    if not rows:
        return html.Div([]), ""
    labelled = len(rows) <= LABELLED_TILES_LIMIT
    groups: dict[str | None, list[Mapping[str, Any]]] = {}
    for row in rows:
        value = (tags.get(row["target"] or "") or {}).get(group_by) if group_by else None
        groups.setdefault(value, []).append(row)
    order = sorted(v for v in groups if v is not None) + ([None] if None in groups else [])
    sections, every_state, every_tile = [], [], []
    for value in order:
        members = sorted(groups[value], key=lambda r: (r["target"] or r["cluster_id"], r["cluster_id"]))
        states = [tile_state(r) for r in members]
        every_state += states
        tiles = [_tile(href, r, state, _problem(r, worst.get(r["cluster_id"])), labelled)
                 for r, state in zip(members, states, strict=True)]
        every_tile.append((value, tiles))
        sections.append(html.Div([_group_head(group_by, value, states),
                                  html.Div(tiles, className="tiles labelled" if labelled else "tiles")],
                                 className="map-group", **{"data-group": value or ""}))
    legend = html.Div([html.Span([html.Span(className=f"swatch sev-{s}"), f"{n:,} {_MAP_STATE_LABEL[s]}"],
                                 className="legend-item")
                       for s, n in _state_counts(every_state).items()], className="map-legend")
    # The tiles decide everything else on the map (headers and legend count their states).
    digest = hashlib.blake2b(orjson.dumps([group_by, every_tile]), digest_size=16).hexdigest()
    return html.Div([legend, *sections]), digest


def cluster_header(cluster_id: str, info: dict[str, Any] | None, n_brokers: int) -> html.Div:
    """Who the cluster is: target, controller, last answer."""
    title = html.H1(["Cluster ", html.Span(_cluster_label(cluster_id), className="mono")])
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
    """The cluster's latest controller changes, newest first (`queries.controller_changes`)."""
    body = [html.Tr(
        [html.Td(format_ts(c["ts"])),
         html.Td("none" if c["controller_id"] in (None, -1) else str(c["controller_id"]), className="num"),
         html.Td(format_age(c["held_ms"]) + (" so far" if c["current"] else ""), className="num")],
        className=_controller_class(c)) for c in rows]
    return html.Div(_table(["Changed at", ("Active controller", "num"), ("Held for", "num")], body,
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
             html.Td(_number(b["broker_epoch"]), className="num"),
             html.Td(format_age(b["heartbeat_age_ms"]), className="num"),
             html.Td(format_age(b["answer_age_ms"]), className="num"),
             html.Td(", ".join(b["endpoints"] or []), className="mono"), html.Td(b["rack"] or "—"),
             html.Td(", ".join(on_fire))],
            className=f"broker-row sev-{worst}"))
    head = [("Broker", "num"), "State", "Fenced", ("Epoch", "num"), ("Last heartbeat", "num"),
            ("Last answered", "num"), "Endpoints", "Rack", "Firing"]
    return _table(head, body, "No broker of this cluster has been seen.")


def _silence_cell(alert: dict[str, Any], silenced: Mapping[str, int]) -> html.Td:
    if alert["status"] != "firing":
        return html.Td("")
    until = silenced.get(alert["alert_id"])
    if until is not None:
        return html.Td(f"silenced until {format_ts(until)}", className="silenced")
    return html.Td(html.Button("silence 2 h", id={"type": "silence", "alert": alert["alert_id"]}, n_clicks=0,
                               className="silence-btn", title="silence its cluster, rule and broker for 2 h"))


def alerts_table(href: Href, rows: list[dict[str, Any]], clock_ms: int | None, *,
                 table_id: str, limit: int, silenced: Mapping[str, int] | None = None) -> html.Div:
    """Alerts, each linking to the page of the cluster it is attributed to.

    With `silenced` (alert id -> end of the silence that covers it), firing alerts get a
    "silence" button, or say until when they are silenced.
    """
    body = []
    for a in rows:
        cluster = (_cluster_link(href, a["cluster_id"]) if a["cluster_id"] is not None
                   else html.Span("—", className="muted"))
        since = None if clock_ms is None else clock_ms - a["starts_at"]
        ended = format_ts(a["ends_at"]) if a["ends_at"] is not None else f"firing for {format_age(since)}"
        body.append(html.Tr(
            [html.Td(a["severity"]), html.Td(a["rule"], className="mono"), html.Td(cluster),
             html.Td(a["target"] or "—"), html.Td("—" if a["broker_id"] is None else a["broker_id"]),
             html.Td(a["endpoint"] or "—", className="mono"), html.Td(format_ts(a["starts_at"])),
             html.Td(ended), html.Td(a["summary"]), *([] if silenced is None else [_silence_cell(a, silenced)])],
            className=f"alert-row sev-{a['severity'] if a['status'] == 'firing' else 'healthy'}",
            **{"data-alert": a["alert_id"]}))
    head = ["Severity", "Rule", "Cluster", "Target", "Broker", "Endpoint", "Started", "Ended", "Summary",
            *([] if silenced is None else ["Silence"])]
    table = _table(head, body, "None.")
    note = ([html.P(f"Showing the first {limit}; narrow the filters to see others.", className="muted")]
            if len(rows) >= limit else [])
    return html.Div([table, *note], id=table_id)


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


# The pipeline charts: (key of the value, panel title), in reading order (left to right, top down).
_PIPELINE_CHARTS = (("input_rows_per_s", "Input rows/s"), ("processed_rows_per_s", "Processed rows/s"),
                    ("batch_duration_s", "Batch duration (s)"),
                    ("watermark_lag_s", "Watermark lag (s): wall clock - watermark"))
_QUERY_COLOURS = ("#1e6fd9", "#d9730d", "#2e9d4f", "#8e44ad")


def _chart_values(batches: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """Each chart's values (NaN where missing: a gap in the line)."""
    def column(values: Iterable[float | None]) -> np.ndarray:
        return np.array([np.nan if v is None else v for v in values], dtype=float)

    return {"input_rows_per_s": column(b["input_rows_per_s"] for b in batches),
            "processed_rows_per_s": column(b["processed_rows_per_s"] for b in batches),
            "batch_duration_s": column(b["batch_duration_ms"] for b in batches) / 1000,
            # As /metrics reads it: how far detection trails the wall clock (the allowed lateness included).
            "watermark_lag_s": (np.array([b["recorded_at"] for b in batches], dtype=float)
                                - column(_watermark(b["watermark_ms"]) for b in batches)) / 1000}


def pipeline_figure(batches: Sequence[Mapping[str, Any]]) -> go.Figure:
    """Input and processed rows/s, batch duration and watermark lag over wall-clock time (UTC),
    one line per streaming query, from `queries.pipeline_series` (oldest first)."""
    fig = make_subplots(rows=2, cols=2, shared_xaxes=True, subplot_titles=[t for _, t in _PIPELINE_CHARTS],
                        vertical_spacing=0.14, horizontal_spacing=0.08)
    names = list(dict.fromkeys(b["query"] for b in batches))
    for i, query in enumerate(names):
        mine = [b for b in batches if b["query"] == query]
        # numpy arrays: plotly checks and encodes them whole (2,000 points as lists cost ~25x more).
        x = np.array([b["recorded_at"] for b in mine], dtype="datetime64[ms]")
        batch_ids = np.array([b["batch_id"] for b in mine], dtype=np.int64)
        values = _chart_values(mine)
        name = html_text.escape(query)  # plotly reads a little HTML in names
        for n, (key, _) in enumerate(_PIPELINE_CHARTS):
            fig.add_trace(go.Scatter(
                x=x, y=values[key], name=name, meta=key, legendgroup=name,
                showlegend=n == 0 and len(names) > 1, mode="lines+markers", marker={"size": 4},
                line={"color": _QUERY_COLOURS[i % len(_QUERY_COLOURS)], "width": 1.5}, customdata=batch_ids,
                hovertemplate=f"%{{y:,.2f}} at %{{x}}<br>batch %{{customdata}}<extra>{name}</extra>"),
                row=n // 2 + 1, col=n % 2 + 1)
    fig.update_layout(
        # The height comes from the page (the graph fills its box): see app._pipeline_page.
        margin={"l": 50, "r": 20, "t": 50, "b": 30},
        # Top left: plotly's tool bar takes the top right on hover.
        legend={"orientation": "h", "x": 0, "y": 1.06, "yanchor": "bottom"},
        paper_bgcolor="rgba(0,0,0,0)", plot_bgcolor="rgba(0,0,0,0)", hovermode="closest",
        # Keep the user's zoom across live refreshes.
        uirevision="pipeline")
    fig.update_xaxes(type="date")
    fig.update_yaxes(rangemode="tozero")
    if not batches:
        fig.add_annotation(text="No batch recorded yet.", showarrow=False, xref="paper", yref="paper",
                           x=0.5, y=0.5)
    return fig


def pipeline_tables(batches: list[dict[str, Any]], reasons: list[dict[str, Any]],
                    backlog: dict[str, Any], now_ms: int) -> html.Div:
    """Latest micro-batches, quarantine by reason and the notifier's backlog."""
    batch_rows = [html.Tr(
        [html.Td(b["query"]), html.Td(b["batch_id"], className="num"), html.Td(format_ts(b["recorded_at"])),
         html.Td(_number(b["input_rows"]), className="num"),
         html.Td(_number(b["input_rows_per_s"], 1), className="num"),
         html.Td(_number(b["processed_rows_per_s"], 1), className="num"),
         html.Td(format_age(b["batch_duration_ms"]), className="num"),
         html.Td(format_ts(_watermark(b["watermark_ms"]))),
         html.Td(_number(b["state_rows"]), className="num"),
         html.Td(_number(None if b["state_memory_bytes"] is None else b["state_memory_bytes"] / 2**20, 1),
                 className="num")],
        className="batch-row") for b in batches]
    batch_head = ["Query", ("Batch", "num"), "Recorded", ("Input rows", "num"), ("Input rows/s", "num"),
                  ("Processed rows/s", "num"), ("Duration", "num"), "Watermark", ("State rows", "num"),
                  ("State MiB", "num")]
    reason_rows = [html.Tr([html.Td(r["reason"], className="mono"), html.Td(_number(r["messages"]), className="num"),
                            html.Td(format_ts(r["last_ms"]))], className="quarantine-row") for r in reasons]
    oldest = backlog["oldest_created_ms"]
    outbox_line = (f"{backlog['pending']:,} notifications waiting, {backlog['failing']:,} after a failed "
                   f"attempt; oldest queued {format_age(now_ms - oldest)} ago" if backlog["pending"]
                   else "Every notification has been delivered.")
    return html.Div([
        html.H2("Latest micro-batches"),
        _table(batch_head, batch_rows, "No batch recorded yet."),
        html.H2("Quarantined messages by reason"),
        html.Div(_table(["Reason", ("Messages", "num"), "Last seen"], reason_rows, "Nothing quarantined."),
                 id="quarantine"),
        html.H2("Notifier outbox"),
        html.P(outbox_line, id="outbox"),
    ])


def _details(row: dict[str, Any]) -> dict[str, Any]:
    # `details` is JSON written from events: any shape may come back.
    details = row.get("details")
    return details if isinstance(details, dict) else {}


def _identity(href: Href, who: Any) -> list[Any]:
    """"cluster <id> node <n>" from a {"cluster_id", "node_id"} detail, the id linked."""
    who = who if isinstance(who, dict) else {}
    cluster_id, node_id = who.get("cluster_id"), who.get("node_id")
    parts: list[Any] = []
    if isinstance(cluster_id, str):
        parts += ["cluster ", _cluster_link(href, cluster_id)]
    if node_id is not None:
        parts.append(f" node {node_id}")
    return parts or ["—"]


def _when(row: dict[str, Any], clock_ms: int | None) -> list[html.Td]:
    since = None if clock_ms is None else clock_ms - row["starts_at"]
    ended = (format_ts(row["ends_at"]) if row["ends_at"] is not None
             else f"firing for {format_age(since)}")
    return [html.Td(format_ts(row["starts_at"])), html.Td(ended)]


def _alert_class(kind: str, row: dict[str, Any]) -> str:
    severity = row["severity"] if row["status"] == "firing" else "healthy"
    return f"{kind} {row['status']} sev-{severity}"


def registry_table(href: Href, rows: list[dict[str, Any]], show_all: bool) -> html.Div:
    """Target -> pinned id -> last seen id; a last id that differs from the pinned one is
    highlighted. Targets in order (same id, no error) collapse into a count when many."""
    def row_of(t: dict[str, Any]) -> html.Tr:
        if t["differs"]:
            status, severity = "last seen id differs from the pinned one", "critical"
        elif t["failing"]:
            status, severity = "failing", "warning"
        elif not t["seen"]:
            status, severity = "configured, never answered", "info"
        elif t["pinned_cluster_id"] is None:
            status, severity = "not pinned", "healthy"
        else:
            status, severity = "ok", "healthy"
        pinned, last = t["pinned_cluster_id"], t["last_cluster_id"]
        error = (f"{t['last_error']} ({format_age(t['last_error_age_ms'])} ago)"
                 if t["last_error"] else "—")
        return html.Tr(
            [html.Td(t["target"]),
             html.Td(_cluster_link(href, pinned) if pinned is not None else "—"),
             html.Td(_cluster_link(href, last) if last is not None else "—",
                     className="differs" if t["differs"] else ""),
             html.Td(status),
             html.Td(format_age(t["last_ok_age_ms"]) + " ago" if t["last_ok_age_ms"] is not None else "—",
                     className="num"),
             html.Td(error)],
            className=f"registry-row sev-{severity}" + (" differs" if t["differs"] else ""),
            **{"data-target": t["target"]})

    head = ["Target", "Pinned cluster id", "Last seen cluster id", "Status", ("Last good answer", "num"),
            "Last error"]
    calm = [t for t in rows if t["seen"] and not t["differs"] and not t["failing"]]
    notable = [t for t in rows if not (t["seen"] and not t["differs"] and not t["failing"])]
    body = [row_of(t) for t in notable]
    if show_all or len(calm) <= HEALTHY_LIST_LIMIT:
        body += [row_of(t) for t in calm[:LISTED_LIMIT]]
        if len(calm) > LISTED_LIMIT:
            body.append(html.Tr(html.Td(f"and {len(calm) - LISTED_LIMIT:,} more targets in order",
                                        colSpan=len(head)), className="healthy-count"))
    else:
        body.append(html.Tr(html.Td(f"{len(calm):,} targets answer with their pinned (or only) id: tick "
                                    "\"list every target\" to see them", colSpan=len(head)),
                            className="healthy-count"))
    return html.Div(_table(head, body, "The store knows of no target yet."), id="registry")


def misrouted_table(href: Href, rows: list[dict[str, Any]], clock_ms: int | None) -> html.Div:
    """connection.misrouted alerts: the endpoint, its target, the identity it should have
    reached and what answered (or the error it refused with)."""
    body = []
    for a in rows:
        details = _details(a)
        answered = (_identity(href, details["answered"]) if "answered" in details
                    else [str(details.get("error") or "—")])
        body.append(html.Tr(
            [html.Td(a["status"]), html.Td(a["endpoint"] or "—", className="mono"), html.Td(a["target"] or "—"),
             html.Td(_identity(href, details.get("expected"))), html.Td(answered), *_when(a, clock_ms)],
            className=_alert_class("misrouted-row", a), **{"data-alert": a["alert_id"]}))
    head = ["Status", "Endpoint", "Target", "Expected", "Answered", "Started", "Ended"]
    return html.Div(_table(head, body, "No endpoint leads to the wrong broker."), id="misrouted")


def collisions_table(href: Href, rows: list[dict[str, Any]], clock_ms: int | None) -> html.Div:
    """endpoint.collision alerts: the address and every cluster/node that advertises it."""
    body = []
    for a in rows:
        advertisers: list[Any] = []
        names = _details(a).get("advertised_by")
        for name in names if isinstance(names, list) else []:
            cluster_id, _, node = str(name).rpartition("/")
            if advertisers:
                advertisers.append(", ")
            advertisers += ([_cluster_link(href, cluster_id), f"/{node}"] if cluster_id else [str(name)])
        body.append(html.Tr(
            [html.Td(a["status"]), html.Td(a["endpoint"] or "—", className="mono"),
             html.Td(advertisers or "—", className="advertisers"), *_when(a, clock_ms)],
            className=_alert_class("collision-row", a), **{"data-alert": a["alert_id"]}))
    head = ["Status", "Address", "Advertised by (cluster/node)", "Started", "Ended"]
    return html.Div(_table(head, body, "No address is advertised by two brokers."), id="collisions")


# A delivery's state as shown: (label, row severity). A pending one is "queued" until its first
# attempt, then "retrying".
_DELIVERY_SHOWN = {"delivered": ("delivered", "healthy"), "dead": ("dead letter", "critical"),
                   "silenced": ("silenced", "quiet")}
DELIVERY_STATES = {"pending": "pending", "delivered": "delivered", "dead": "dead letter", "silenced": "silenced"}


def _delivery_shown(row: Mapping[str, Any], now_ms: int) -> tuple[str, str]:
    state = row["state"]
    if state in _DELIVERY_SHOWN:
        return _DELIVERY_SHOWN[state]
    if state != "pending":
        return str(state), "info"
    if not row["attempts"]:
        return "queued", "info"
    due = row["next_attempt_at"]
    return ("retrying" + (f", next in {format_age(due - now_ms)}" if due is not None and due > now_ms else ""),
            "warning")


def delivery_summary(counts: Mapping[str, Any]) -> html.Div:
    """Deliveries by state, and what waits in the outbox for the notifier (`queries.delivery_counts`)."""
    cards = [_card(counts["delivered"], "delivered", "healthy" if counts["delivered"] else ""),
             _card(counts["retrying"], "retrying", "warning" if counts["retrying"] else ""),
             _card(counts["queued"], "queued", "info" if counts["queued"] else ""),
             _card(counts["dead"], "dead letters", "critical" if counts["dead"] else ""),
             _card(counts["silenced"], "silenced"),
             _card(counts["unplanned"], "in the outbox, not picked up by the notifier yet",
                   "warning" if counts["unplanned"] else "")]
    return html.Div(cards, className="strip", id="deliveries-summary")


def deliveries_table(href: Href, rows: Sequence[Mapping[str, Any]], now_ms: int, limit: int) -> html.Div:
    """Deliveries, latest activity first: receiver (its name only: a receiver's URL may hold a
    token), the alert (rule linking to it, subject), the notification (firing or resolved), state,
    attempts, last attempt and last error."""
    body = []
    for d in rows:
        label, severity = _delivery_shown(d, now_ms)
        alert = dcc.Link(d["rule"] or d["alert_id"], href=href("/alerts?alert=" + quote(d["alert_id"], safe="")),
                         className="alert-link mono", title=d["summary"] or d["alert_id"])
        body.append(html.Tr(
            [html.Td(d["receiver"]), html.Td(alert), html.Td(d["subject"] or "—", className="mono"),
             html.Td(d["status"] or "—"), html.Td(label), html.Td(_number(d["attempts"]), className="num"),
             html.Td(format_ts(d["last_attempt_at"])),
             # The notifier scrubs errors before it stores them; scrub again, the page is no place for a secret.
             html.Td(redact_text(d["last_error"]) if d["last_error"] else "—", className="error")],
            className=f"delivery-row sev-{severity}", **{"data-receiver": d["receiver"], "data-alert": d["alert_id"]}))
    head = ["Receiver", "Alert", "Subject", "Notification", "State", ("Attempts", "num"), "Last attempt",
            "Last error"]
    note = ([html.P(f"Showing the latest {limit}; narrow the filters to see others.", className="muted")]
            if len(rows) >= limit else [])
    empty = "No delivery recorded: the notifier (fleetwatch notify) has delivered nothing from this store yet."
    return html.Div([_table(head, body, empty), *note], id="deliveries-list")
