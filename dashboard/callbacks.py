"""The dashboard's callbacks: routing a URL to its page's skeleton, the store's status, each page's
data (from `PageContent`) on every refresh and control change, the alerts page's silence
button (refused, server-side, to a role that may not silence: `auth`), and the browser-side
callbacks that write the filters into the address bar.

Navigation renders a page's skeleton (its controls) once; the interval and the controls then
refresh only the page's data, so a live refresh never steals the focus from the search box.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote

import plotly.graph_objects as go
from dash import ALL, Dash, Input, Output, State, ctx, html, no_update
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from dashboard.auth import silence_author
from dashboard.layouts import (
    TAG_FILTER,
    alerts_layout,
    cluster_layout,
    deliveries_layout,
    identity_layout,
    incidents_layout,
    not_found_layout,
    overview_layout,
    parse_query,
    pipeline_layout,
)
from dashboard.page_content import PageContent
from dashboard.queries.alerts import alert_rules
from dashboard.queries.deliveries import delivery_receivers
from dashboard.queries.shared import fleet_clock_ms
from dashboard.views.formatting import format_ts

__all__ = ["register_callbacks"]

_CLUSTER_PREFIX = "cluster/"


def _cluster_id(app: Dash, pathname: str | None) -> str | None:
    """The cluster id of a cluster page's URL (percent-encoded by the browser), else None."""
    path = app.strip_relative_path(pathname or "/") or ""
    return unquote(path.removeprefix(_CLUSTER_PREFIX)) if path.startswith(_CLUSTER_PREFIX) else None


def _replace_query_js(page_path: str, build: str) -> str:
    """A browser-side callback that writes the filters into the address bar of `page_path`.

    `build` fills the URLSearchParams `q` from the callback's arguments (`args`). replaceState:
    the address follows the filters without a history entry per keystroke.
    """
    return f"""function (...args) {{
        const loc = window.location;
        if (loc.pathname !== {json.dumps(page_path)}) {{ return; }}
        const q = new URLSearchParams();
        {build}
        const s = q.toString();
        const url = loc.pathname + (s ? "?" + s : "") + loc.hash;
        if (url !== loc.pathname + loc.search + loc.hash) {{
            window.history.replaceState(window.history.state, "", url);
        }}
    }}"""


def register_callbacks(app: Dash, engine: Engine, content: PageContent) -> None:
    """Every callback of the dashboard on `app`, its pages' data from `content`."""
    tag_options = content.tag_options()

    @app.callback(Output("page", "children"), Input("url", "pathname"), State("url", "search"))
    def route(pathname: str | None, search: str | None) -> html.Div:
        path = app.strip_relative_path(pathname or "/") or ""
        query = parse_query(search)
        if path == "":
            return overview_layout(tag_options, content.default_group, query)
        if path == "alerts":
            return alerts_layout(alert_rules(engine), query)
        if path == "deliveries":
            return deliveries_layout(delivery_receivers(engine), query)
        if path == "identity":
            return identity_layout()
        if path == "incidents":
            return incidents_layout()
        if path == "pipeline":
            return pipeline_layout()
        if _cluster_id(app, pathname) is not None:
            return cluster_layout()
        return not_found_layout()

    @app.callback(Output("status", "children"), Output("status", "className"), Input("tick", "n_intervals"))
    def status(_n: int | None) -> tuple[str, str]:
        # The one place a store outage shows: the pages then keep their last good content.
        try:
            clock = fleet_clock_ms(engine)
        except SQLAlchemyError as exc:
            return f"store unavailable: {type(exc).__name__}", "status down"
        return f"fleet clock {format_ts(clock)}", "status"

    tag_filter = {"type": TAG_FILTER, "key": ALL}

    @app.callback(Output("overview-summary", "children"), Output("fleet-map", "children"),
                  Output("fleet-map-key", "data"), Output("overview-body", "children"),
                  Input("tick", "n_intervals"), Input("search", "value"), Input("show-healthy", "value"),
                  Input("map-group", "value"), Input(tag_filter, "value"), State(tag_filter, "id"),
                  State("fleet-map-key", "data"))
    def overview(_n: int | None, search: str | None, show: list[str] | None, group: str | None,
                 tag_values: list[list[str] | None], tag_ids: list[dict[str, str]],
                 shown_key: str | None) -> tuple[Any, ...]:
        selected = {i["key"]: v or [] for i, v in zip(tag_ids, tag_values, strict=True)}
        return content.overview(search or "", bool(show), selected, group, shown_key)

    app.clientside_callback(
        _replace_query_js(app.get_relative_path("/"), """
        const [search, show, group, tagValues, tagIds] = args;
        (tagIds || []).forEach((id, i) => (tagValues[i] || []).forEach(v => q.append(id.key, v)));
        if (search) { q.set("q", search); }
        if (show && show.length) { q.set("healthy", "1"); }
        if (group !== null && group !== undefined && group !== DEFAULT_GROUP) { q.set("group", group); }
        """.replace("DEFAULT_GROUP", json.dumps(content.default_group))),
        Input("search", "value"), Input("show-healthy", "value"), Input("map-group", "value"),
        Input(tag_filter, "value"), State(tag_filter, "id"))

    @app.callback(Output("cluster-body", "children"), Output("cluster-timeline", "figure"),
                  Input("tick", "n_intervals"), State("url", "pathname"))
    def cluster(_n: int | None, pathname: str | None) -> tuple[html.Div, go.Figure]:
        return content.cluster(_cluster_id(app, pathname) or "")

    @app.callback(Output("alerts-body", "children"), Input("tick", "n_intervals"),
                  Input("alerts-rule", "value"), Input("alerts-severity", "value"),
                  Input("alerts-cluster", "value"), Input("alerts-id", "value"), Input("silence-result", "children"))
    def alerts(_n: int | None, rules: list[str] | None, severities: list[str] | None,
               cluster: str | None, alert_id: str | None, _silenced: Any) -> html.Div:
        return content.alerts(rules or (), severities or (), cluster or "", alert_id or "")

    @app.callback(Output("silence-result", "children"), Input({"type": "silence", "alert": ALL}, "n_clicks"),
                  State("silence-reason", "value"), prevent_initial_call=True)
    def silence(_clicks: list[int | None], reason: str | None) -> str:
        # A refresh re-renders the buttons (n_clicks 0): only a real click counts.
        clicked = [json.loads(t["prop_id"].rsplit(".", 1)[0]) for t in ctx.triggered if t.get("value")]
        if not clicked:
            return no_update
        # The role is checked here, where the write is, not only by what the page shows.
        who, refusal = silence_author()
        if who is None:
            return refusal
        return content.silence(clicked[0]["alert"], reason or "", who)

    app.clientside_callback(
        _replace_query_js(app.get_relative_path("/alerts"), """
        const [rules, severities, cluster, alertId] = args;
        (rules || []).forEach(v => q.append("rule", v));
        (severities || []).forEach(v => q.append("severity", v));
        if (cluster) { q.set("cluster", cluster); }
        if (alertId) { q.set("alert", alertId); }"""),
        Input("alerts-rule", "value"), Input("alerts-severity", "value"), Input("alerts-cluster", "value"),
        Input("alerts-id", "value"))

    @app.callback(Output("deliveries-head", "children"), Output("deliveries-body", "children"),
                  Input("tick", "n_intervals"), Input("deliveries-receiver", "value"),
                  Input("deliveries-state", "value"))
    def deliveries(_n: int | None, receivers: list[str] | None, states: list[str] | None) -> tuple[html.Div, html.Div]:
        return content.deliveries(receivers or (), states or ())

    app.clientside_callback(
        _replace_query_js(app.get_relative_path("/deliveries"), """
        const [receivers, states] = args;
        (receivers || []).forEach(v => q.append("receiver", v));
        (states || []).forEach(v => q.append("state", v));"""),
        Input("deliveries-receiver", "value"), Input("deliveries-state", "value"))

    @app.callback(Output("identity-body", "children"), Input("tick", "n_intervals"),
                  Input("identity-show-all", "value"))
    def identity(_n: int | None, show_all: list[str] | None) -> html.Div:
        return content.identity(bool(show_all))

    @app.callback(Output("incidents-body", "children"), Input("tick", "n_intervals"), State("url", "search"))
    def incidents(_n: int | None, search: str | None) -> html.Div:
        # `?incident=<id>`: the one a notification links (issue 43).
        return content.incidents(parse_query(search).get("incident", [""])[0])

    @app.callback(Output("pipeline-charts", "figure"), Output("pipeline-body", "children"),
                  Input("tick", "n_intervals"))
    def pipeline(_n: int | None) -> tuple[go.Figure, html.Div]:
        return content.pipeline()
