"""The SRE dashboard: a Dash app over the store, one page per URL, refreshed by an interval.

Pages: `/` fleet overview, `/cluster/<cluster_id>`, `/alerts`, `/pipeline`. Navigation renders a
page's skeleton (its controls) once; the interval and the controls then refresh only the
page's data, so a live refresh never steals the focus from the search box.
"""

from __future__ import annotations

import hmac
import logging
import os
import time
from urllib.parse import unquote

import flask
import plotly.graph_objects as go
from dash import Dash, Input, Output, State, dcc, html
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from dashboard import queries, views
from streaming.sinks.store import Store

__all__ = ["create_app"]

log = logging.getLogger(__name__)

_ALERT_LIMIT = 200
_CLUSTER_PREFIX = "cluster/"


def create_app(store_url: str, *, refresh_ms: int = 2000) -> Dash:
    """The dashboard over the store at `store_url`, refreshing every `refresh_ms`.

    When FLEETWATCH_DASHBOARD_USER and FLEETWATCH_DASHBOARD_PASSWORD are both set, every
    request needs HTTP basic auth with them.
    """
    engine = Store(store_url).engine
    # No "Updating..." flicker in the tab title on every refresh.
    app = Dash(__name__, title="fleetwatch", update_title=None)
    app.index_string = app.index_string.replace("{%css%}", "{%css%}<style>" + views.CSS + "</style>")
    href = app.get_relative_path
    app.layout = html.Div([
        dcc.Location(id="url"),
        dcc.Interval(id="tick", interval=refresh_ms),
        html.Nav([dcc.Link("fleetwatch", href=href("/"), className="brand"),
                  dcc.Link("Fleet", href=href("/")), dcc.Link("Alerts", href=href("/alerts")),
                  dcc.Link("Pipeline", href=href("/pipeline")),
                  html.Span(id="status", className="status")]),
        html.Main(id="page"),
    ])
    # Every page's controls, so Dash can check callbacks against components not yet shown.
    app.validation_layout = html.Div([app.layout, _overview_page(), _cluster_page(),
                                      _alerts_page([]), _pipeline_page()])
    _register_callbacks(app, engine)
    user = os.environ.get("FLEETWATCH_DASHBOARD_USER")
    password = os.environ.get("FLEETWATCH_DASHBOARD_PASSWORD")
    if user and password:
        _require_basic_auth(app.server, user, password)
        log.info("dashboard basic auth enabled", extra={"user": user})
    return app


def _overview_page() -> html.Div:
    return html.Div([
        html.H1("Fleet"),
        html.Div(id="overview-summary"),
        html.Div([dcc.Input(id="search", type="search", placeholder="Search cluster name or id",
                            debounce=False, autoComplete="off"),
                  dcc.Checklist(id="show-healthy", options=[{"label": " list healthy clusters",
                                                             "value": "show"}], value=[])],
                 className="controls"),
        html.Div(id="overview-body"),
    ])


def _cluster_page() -> html.Div:
    return html.Div([
        html.Div(id="cluster-body"),
        html.H2("Broker states over time"),
        dcc.Graph(id="cluster-timeline", config={"displaylogo": False}),
    ])


def _alerts_page(rules: list[str]) -> html.Div:
    return html.Div([
        html.H1("Alerts"),
        html.Div([dcc.Dropdown(id="alerts-rule", options=rules, multi=True, placeholder="Rule"),
                  dcc.Dropdown(id="alerts-severity", options=list(queries.SEVERITIES), multi=True,
                               placeholder="Severity"),
                  dcc.Input(id="alerts-cluster", type="search", placeholder="Cluster id or target",
                            autoComplete="off")],
                 className="controls"),
        html.Div(id="alerts-body"),
    ])


def _pipeline_page() -> html.Div:
    return html.Div([html.H1("Pipeline"), html.Div(id="pipeline-body")])


def _cluster_id(app: Dash, pathname: str | None) -> str | None:
    """The cluster id of a cluster page's URL (percent-encoded by the browser), else None."""
    path = app.strip_relative_path(pathname or "/") or ""
    return unquote(path.removeprefix(_CLUSTER_PREFIX)) if path.startswith(_CLUSTER_PREFIX) else None


def _register_callbacks(app: Dash, engine: Engine) -> None:
    href = app.get_relative_path

    @app.callback(Output("page", "children"), Input("url", "pathname"))
    def route(pathname: str | None) -> html.Div:
        path = app.strip_relative_path(pathname or "/") or ""
        if path == "":
            return _overview_page()
        if path == "alerts":
            return _alerts_page(queries.alert_rules(engine))
        if path == "pipeline":
            return _pipeline_page()
        if _cluster_id(app, pathname) is not None:
            return _cluster_page()
        return html.Div([html.H1("Not found"), html.P("No such page.", className="muted")])

    @app.callback(Output("status", "children"), Output("status", "className"), Input("tick", "n_intervals"))
    def status(_n: int | None) -> tuple[str, str]:
        # The one place a store outage shows: the pages then keep their last good content.
        try:
            clock = queries.fleet_clock_ms(engine)
        except SQLAlchemyError as exc:
            return f"store unavailable: {type(exc).__name__}", "status down"
        return f"fleet clock {views.format_ts(clock)}", "status"

    @app.callback(Output("overview-summary", "children"), Output("overview-body", "children"),
                  Input("tick", "n_intervals"), Input("search", "value"), Input("show-healthy", "value"))
    def overview(_n: int | None, search: str | None, show: list[str] | None) -> tuple[html.Div, html.Div]:
        rows = queries.fleet_overview(engine, search or "")
        # A search narrows the list enough to show healthy matches one by one.
        listed = bool(show) or bool((search or "").strip())
        return views.summary_strip(queries.fleet_summary(engine)), views.fleet_table(href, rows, listed)

    @app.callback(Output("cluster-body", "children"), Output("cluster-timeline", "figure"),
                  Input("tick", "n_intervals"), State("url", "pathname"))
    def cluster(_n: int | None, pathname: str | None) -> tuple[html.Div, go.Figure]:
        cluster_id = _cluster_id(app, pathname) or ""
        brokers = queries.cluster_brokers(engine, cluster_id)
        firing = queries.cluster_alerts(engine, cluster_id, "firing")
        resolved = queries.cluster_alerts(engine, cluster_id, "resolved", limit=20)
        clock = queries.fleet_clock_ms(engine)
        body = html.Div([
            views.cluster_header(cluster_id, queries.cluster_info(engine, cluster_id), len(brokers)),
            html.H2("Brokers"), views.brokers_table(brokers, firing),
            html.H2("Firing alerts"),
            views.alerts_table(href, firing, clock, table_id="cluster-firing", limit=50),
            html.H2("Recently resolved alerts"),
            views.alerts_table(href, resolved, clock, table_id="cluster-resolved", limit=20),
        ])
        return body, views.timeline_figure(queries.broker_timeline(engine, cluster_id), cluster_id)

    @app.callback(Output("alerts-body", "children"), Input("tick", "n_intervals"),
                  Input("alerts-rule", "value"), Input("alerts-severity", "value"),
                  Input("alerts-cluster", "value"))
    def alerts(_n: int | None, rules: list[str] | None, severities: list[str] | None,
               cluster: str | None) -> html.Div:
        filters = {"rules": rules or (), "severities": severities or (), "cluster": cluster or "",
                   "limit": _ALERT_LIMIT}
        clock = queries.fleet_clock_ms(engine)
        return html.Div([
            html.H2("Firing"),
            views.alerts_table(href, queries.alert_list(engine, "firing", **filters), clock,
                               table_id="alerts-firing", limit=_ALERT_LIMIT),
            html.H2("Recently resolved"),
            views.alerts_table(href, queries.alert_list(engine, "resolved", **filters), clock,
                               table_id="alerts-resolved", limit=_ALERT_LIMIT),
        ])

    @app.callback(Output("pipeline-body", "children"), Input("tick", "n_intervals"))
    def pipeline(_n: int | None) -> html.Div:
        return views.pipeline_tables(queries.pipeline_batches(engine), queries.quarantine_reasons(engine),
                                     queries.outbox_backlog(engine), int(time.time() * 1000))


def _require_basic_auth(server: flask.Flask, user: str, password: str) -> None:
    expected_user, expected_password = user.encode(), password.encode()

    @server.before_request
    def check() -> flask.Response | None:
        auth = flask.request.authorization
        # compare_digest: no timing hint about how much of a guess was right.
        if (auth is not None and auth.type == "basic"
                and hmac.compare_digest((auth.username or "").encode(), expected_user)
                and hmac.compare_digest((auth.password or "").encode(), expected_password)):
            return None
        return flask.Response("authentication required\n", 401,
                              {"WWW-Authenticate": 'Basic realm="fleetwatch"'})
