"""The SRE dashboard: a Dash app over the store, one page per URL, refreshed by an interval.

Pages: `/` fleet overview (fleet map and table), `/cluster/<cluster_id>`, `/alerts`, `/deliveries`,
`/identity`, `/pipeline` (charts and tables).
Navigation renders a page's skeleton (its controls) once; the interval and the controls then
refresh only the page's data, so a live refresh never steals the focus from the search box.

The alerts page silences a firing alert (its cluster, rule, broker and endpoint, 2 h, with a
reason) the way `fleetwatch silence add` does. Who may: with basic auth on (both
FLEETWATCH_DASHBOARD_USER and FLEETWATCH_DASHBOARD_PASSWORD set; one without the other is an
error), only the authenticated user, whose name the silence records; with it off, anyone who
reaches the page, so a dashboard without auth that listens beyond loopback says so in a warning.

Filters live in the URL's query string (`/alerts?rule=broker.fenced&severity=critical&cluster=pay`,
`/alerts?alert=<alert id>`, `/?env=prod&region=eu&q=pay&healthy=1&group=region`,
`/deliveries?receiver=ops&state=dead`): a page opened from a pasted link starts filtered, and
changing a filter rewrites the address in place (no history entry per keystroke).

The fleet map is sent to the browser only when it changed (the browser keeps the key of the map
it shows): at 1,000 clusters it is ~220 KB, and most refreshes change nothing on it.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import parse_qs, unquote

import flask
import plotly.graph_objects as go
from dash import ALL, Dash, Input, Output, State, ctx, dcc, html, no_update
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from dashboard import queries, views
from streaming.config import ConfigError
from streaming.store import Silence, Store, add_silence

__all__ = ["Pages", "basic_auth_from_env", "create_app"]

log = logging.getLogger(__name__)

_ALERT_LIMIT = 200
_DELIVERY_LIMIT = 200
_CLUSTER_PREFIX = "cluster/"
_TAG = "tag-filter"
_IDENTITY_RULES = ("cluster.id_changed", "cluster.id_duplicate", "cluster.id_invalid")
SILENCE_MS = 2 * 3600_000
AUTH_USER_ENV = "FLEETWATCH_DASHBOARD_USER"
AUTH_PASSWORD_ENV = "FLEETWATCH_DASHBOARD_PASSWORD"

Tags = Mapping[str, Mapping[str, str]]
Query = dict[str, list[str]]


class Pages:
    """Each page's data as a plain function of its controls' values.

    The Dash callbacks return these; bench/dashboard_callbacks.py times them. `tags` maps a
    target name to its tags (from the config), None when the dashboard runs without one.
    """

    def __init__(self, store: Store, href: views.Href, tags: Tags | None = None) -> None:
        self.store = store
        self.engine = store.engine
        self.href = href
        self.tags = {name: dict(t) for name, t in (tags or {}).items()}
        # The Tags column only when some target has a tag.
        self._tag_column = self.tags if any(self.tags.values()) else None
        keys = self.tag_options()
        # The fleet map groups by env when there is such a tag, else by the first tag key.
        self.default_group = "env" if "env" in keys else next(iter(keys), "")

    def tag_options(self) -> dict[str, list[str]]:
        """Every tag key of the configured targets, with its values."""
        options: dict[str, set[str]] = {}
        for own in self.tags.values():
            for key, value in own.items():
                options.setdefault(key, set()).add(value)
        return {key: sorted(values) for key, values in sorted(options.items())}

    def overview(self, search: str = "", show_healthy: bool = False,
                 selected: Mapping[str, Sequence[str]] | None = None, group_by: str | None = None,
                 shown_key: str | None = None) -> tuple[html.Div, Any, str, html.Div]:
        """Summary, fleet map, the map's key (a digest of it) and the table. The filters narrow
        both map and table; `group_by` (a tag key, "" for none, None for the default) groups the
        map. The map is no_update when its key is `shown_key`: the browser already shows it."""
        names = queries.tagged_targets(self.tags, selected or {})
        rows = queries.fleet_overview(self.engine, search, names)
        group_by = self.default_group if group_by is None else group_by
        fleet_map, key = views.fleet_map(self.href, rows, queries.worst_alerts(self.engine), self.tags, group_by)
        # A search narrows the list enough to show healthy matches one by one.
        listed = show_healthy or bool(search.strip())
        return (views.summary_strip(queries.fleet_summary(self.engine, names)),
                no_update if key == shown_key else fleet_map, key,
                views.fleet_table(self.href, rows, listed, self._tag_column))

    def cluster(self, cluster_id: str) -> tuple[html.Div, go.Figure]:
        engine, href = self.engine, self.href
        brokers = queries.cluster_brokers(engine, cluster_id)
        firing = queries.cluster_alerts(engine, cluster_id, "firing")
        resolved = queries.cluster_alerts(engine, cluster_id, "resolved", limit=20)
        clock = queries.fleet_clock_ms(engine)
        body = html.Div([
            views.cluster_header(cluster_id, queries.cluster_info(engine, cluster_id), len(brokers)),
            html.H2("Brokers"), views.brokers_table(brokers, firing),
            html.H2("Firing alerts"),
            views.alerts_table(href, firing, clock, table_id="cluster-firing", limit=50),
            html.H2("Controller history"),
            views.controller_table(queries.controller_changes(engine, cluster_id, limit=20)),
            html.H2("Recently resolved alerts"),
            views.alerts_table(href, resolved, clock, table_id="cluster-resolved", limit=20),
        ])
        return body, views.timeline_figure(queries.broker_timeline(engine, cluster_id), cluster_id)

    def alerts(self, rules: Sequence[str] = (), severities: Sequence[str] = (), cluster: str = "",
               alert_id: str = "") -> html.Div:
        filters: dict[str, Any] = {"rules": rules, "severities": severities, "cluster": cluster,
                                   "alert_id": alert_id, "limit": _ALERT_LIMIT}
        clock = queries.fleet_clock_ms(self.engine)
        firing = queries.alert_list(self.engine, "firing", **filters)
        return html.Div([
            html.H2("Firing"),
            views.alerts_table(self.href, firing, clock, table_id="alerts-firing", limit=_ALERT_LIMIT,
                               silenced=self.silenced(firing)),
            html.H2("Recently resolved"),
            views.alerts_table(self.href, queries.alert_list(self.engine, "resolved", **filters), clock,
                               table_id="alerts-resolved", limit=_ALERT_LIMIT),
        ])

    def silenced(self, firing: list[queries.Row]) -> dict[str, int]:
        """Firing alert id -> when the latest-ending silence in force that matches it ends."""
        found = [Silence.from_row(r) for r in queries.active_silences(self.engine, int(time.time() * 1000))]
        out: dict[str, int] = {}
        for a in firing if found else []:
            subject = {**a, "cluster_id": a["alert_cluster_id"]}
            until = next((s.ends_at for s in found if s.matches(subject)), None)
            if until is not None:
                out[a["alert_id"]] = until
        return out

    def silence(self, alert_id: str, reason: str, created_by: str) -> str:
        """Silence a firing alert's cluster (its target when it names no cluster), rule and
        broker for 2 h, like `fleetwatch silence add`; returns what to tell the user."""
        a = queries.alert(self.engine, alert_id)
        if a is None or a["status"] != "firing":
            return "That alert is no longer firing: nothing silenced."
        if not reason.strip():
            return "Give a reason for the silence first."
        try:
            # The alert's endpoint too: silencing one misrouted endpoint must not silence the
            # cluster's other misroutes.
            s = add_silence(self.store, cluster=a["cluster_id"] or a["target"], rule=a["rule"],
                            broker_id=a["broker_id"], endpoint=a["endpoint"], duration_ms=SILENCE_MS,
                            reason=reason, created_by=created_by)
        except ConfigError as exc:
            return f"Not silenced: {exc}"
        log.info("silence added from the dashboard", extra={"silence": s.id, "matchers": s.matchers()})
        return f"Silence {s.id}: {s.matchers()} until {views.format_ts(s.ends_at)} ({s.reason})."

    def identity(self, show_all: bool = False) -> html.Div:
        engine, href = self.engine, self.href
        clock = queries.fleet_clock_ms(engine)
        id_alerts = (queries.alert_list(engine, "firing", rules=_IDENTITY_RULES, limit=50)
                     + queries.alert_list(engine, "resolved", rules=_IDENTITY_RULES, limit=20))
        return html.Div([
            html.H2("Cluster-id registry"),
            views.registry_table(href, queries.target_registry(engine, self.tags.keys()), show_all),
            html.H2("Misrouted endpoints"),
            views.misrouted_table(href, queries.endpoint_alerts(engine, "connection.misrouted"), clock),
            html.H2("Endpoint collisions"),
            views.collisions_table(href, queries.endpoint_alerts(engine, "endpoint.collision"), clock),
            html.H2("Cluster-id alerts"),
            views.alerts_table(href, id_alerts, clock, table_id="identity-alerts", limit=70),
        ])

    def deliveries(self, receivers: Sequence[str] = (), states: Sequence[str] = ()) -> tuple[html.Div, html.Div]:
        """Counts by state and the latest deliveries (receivers by name only)."""
        rows = queries.delivery_list(self.engine, receivers=receivers, states=states, limit=_DELIVERY_LIMIT)
        return (views.delivery_summary(queries.delivery_counts(self.engine)),
                views.deliveries_table(self.href, rows, int(time.time() * 1000), _DELIVERY_LIMIT))

    def pipeline(self) -> tuple[go.Figure, html.Div]:
        return (views.pipeline_figure(queries.pipeline_series(self.engine)),
                views.pipeline_tables(queries.pipeline_batches(self.engine), queries.quarantine_reasons(self.engine),
                                      queries.outbox_backlog(self.engine), int(time.time() * 1000)))


def create_app(store_url: str, *, refresh_ms: int = 2000, tags: Tags | None = None,
               host: str | None = None) -> Dash:
    """The dashboard over the store at `store_url`, refreshing every `refresh_ms`.

    `tags` maps a target name to its tags (`{c.name: c.tags for c in config.clusters}`): the
    overview then has one filter per tag key. When FLEETWATCH_DASHBOARD_USER and
    FLEETWATCH_DASHBOARD_PASSWORD are both set, every request needs HTTP basic auth with them.
    `host`: the address the server will listen on, when the caller knows it (else the first
    request tells); without auth, one beyond loopback gets a warning.
    """
    store = Store(store_url)
    engine = store.engine
    # No "Updating..." flicker in the tab title on every refresh. The style sheet (and the fleet
    # map's click handler) are served from dashboard/assets/.
    app = Dash(__name__, title="fleetwatch", update_title=None)
    href = app.get_relative_path
    pages = Pages(store, href, tags)
    app.layout = html.Div([
        dcc.Location(id="url"),
        dcc.Interval(id="tick", interval=refresh_ms),
        html.Nav([dcc.Link("fleetwatch", href=href("/"), className="brand"),
                  dcc.Link("Fleet", href=href("/")), dcc.Link("Alerts", href=href("/alerts")),
                  dcc.Link("Deliveries", href=href("/deliveries")),
                  dcc.Link("Identity & routing", href=href("/identity")),
                  dcc.Link("Pipeline", href=href("/pipeline")),
                  html.Span(id="status", className="status")]),
        html.Main(id="page"),
    ])
    # Every page's controls, so Dash can check callbacks against components not yet shown.
    app.validation_layout = html.Div([app.layout, _overview_page(pages.tag_options(), pages.default_group, {}),
                                      _cluster_page(), _alerts_page([], {}), _deliveries_page([], {}),
                                      _identity_page(), _pipeline_page()])
    _register_callbacks(app, engine, pages)
    auth = basic_auth_from_env()
    if auth is not None:
        _require_basic_auth(app.server, *auth)
        log.info("dashboard basic auth enabled", extra={"user": auth[0]})
    elif host is not None:
        _warn_if_exposed(host)
    else:
        _warn_once_if_served_beyond_loopback(app.server)
    return app


def basic_auth_from_env() -> tuple[str, str] | None:
    """The dashboard's basic-auth user and password, or None (no auth). One of the two variables
    without the other is a ConfigError: auth must not be off because of a typo."""
    user, password = os.environ.get(AUTH_USER_ENV), os.environ.get(AUTH_PASSWORD_ENV)
    if bool(user) != bool(password):
        missing = AUTH_PASSWORD_ENV if user else AUTH_USER_ENV
        raise ConfigError(f"dashboard basic auth needs both {AUTH_USER_ENV} and {AUTH_PASSWORD_ENV}; "
                          f"{missing} is not set")
    return (user, password) if user and password else None


def _warn_if_exposed(host: str) -> None:
    """Warn when a dashboard without auth listens on `host` beyond loopback: anyone who reaches it
    sees the fleet and can silence alerts."""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        log.warning(f"dashboard auth is off and it listens on {host}: anyone who reaches it can silence "
                    f"alerts (set {AUTH_USER_ENV} and {AUTH_PASSWORD_ENV})", extra={"host": host})


def _warn_once_if_served_beyond_loopback(server: flask.Flask) -> None:
    # Under gunicorn the bind is not the app's to know: the first request tells it (SERVER_NAME is
    # the listening address, for gunicorn and werkzeug alike).
    checked = False

    @server.before_request
    def check() -> None:
        nonlocal checked
        if not checked:
            checked = True
            _warn_if_exposed(flask.request.environ.get("SERVER_NAME", ""))


def _query(search: str | None) -> Query:
    """A URL's query string as lists of values; "a,b" counts as two values of a list filter.
    An empty value is kept: `group=` asks for no grouping."""
    return parse_qs((search or "").removeprefix("?"), keep_blank_values=True)


def _listed(query: Query, key: str) -> list[str]:
    return [part for value in query.get(key, []) for part in value.split(",") if part]


def _overview_page(tag_options: Mapping[str, list[str]], default_group: str, query: Query) -> html.Div:
    tag_filters = [html.Div(dcc.Dropdown(id={"type": _TAG, "key": key}, options=values, multi=True,
                                         placeholder=key, value=[v for v in query.get(key, []) if v in values]),
                            className="tag-filter", **{"data-tag": key})
                   for key, values in tag_options.items()]
    group = query.get("group", [default_group])[0]
    group_options = [{"label": "no grouping", "value": ""}, *({"label": f"group by {k}", "value": k}
                                                               for k in tag_options)]
    return html.Div([
        html.H1("Fleet"),
        html.Div(id="overview-summary"),
        html.Div([dcc.Input(id="search", type="search", placeholder="Search cluster name or id",
                            debounce=False, autoComplete="off", value=query.get("q", [""])[0]),
                  *tag_filters],
                 className="controls"),
        html.Div([html.H2("Fleet map"),
                  # Without tags there is nothing to group by: the control stays, hidden.
                  html.Div(dcc.Dropdown(id="map-group", options=group_options, clearable=False,
                                        value=group if group in tag_options or group == "" else default_group),
                           className="map-group-control", hidden=not tag_options)],
                 className="map-head"),
        html.Div(id="fleet-map", className="fleet-map panel"),
        dcc.Store(id="fleet-map-key"),
        html.Div([html.H2("Clusters"),
                  dcc.Checklist(id="show-healthy", options=[{"label": " list healthy clusters", "value": "show"}],
                                value=["show"] if query.get("healthy", [""])[0] not in ("", "0") else [])],
                 className="table-head"),
        html.Div(id="overview-body"),
    ])


def _cluster_page() -> html.Div:
    return html.Div([
        html.Div(id="cluster-body"),
        html.H2("Broker states over time"),
        dcc.Graph(id="cluster-timeline", config={"displaylogo": False}, className="panel"),
    ])


def _alerts_page(rules: list[str], query: Query) -> html.Div:
    chosen_rules = _listed(query, "rule")
    return html.Div([
        html.H1("Alerts"),
        html.Div([dcc.Dropdown(id="alerts-rule", options=sorted({*rules, *chosen_rules}), multi=True,
                               placeholder="Rule", value=chosen_rules),
                  dcc.Dropdown(id="alerts-severity", options=list(queries.SEVERITIES), multi=True,
                               placeholder="Severity",
                               value=[s for s in _listed(query, "severity") if s in queries.SEVERITIES]),
                  dcc.Input(id="alerts-cluster", type="search", placeholder="Cluster id or target",
                            autoComplete="off", value=query.get("cluster", [""])[0]),
                  html.Div(dcc.Input(id="alerts-id", type="search", placeholder="Alert id", autoComplete="off",
                                     value=query.get("alert", [""])[0]), className="alert-id-filter")],
                 className="controls"),
        html.Div([dcc.Input(id="silence-reason", type="text", autoComplete="off", maxLength=500,
                            placeholder="Reason for a silence (e.g. planned rolling restart)"),
                  html.Span(id="silence-result", className="muted")], className="controls"),
        html.Div(id="alerts-body"),
    ])


def _deliveries_page(receivers: list[str], query: Query) -> html.Div:
    chosen = _listed(query, "receiver")
    return html.Div([
        html.H1("Deliveries"),
        html.P("What the notifier did with each alert notification, per receiver (receivers by name only).",
               className="muted"),
        html.Div(id="deliveries-head"),
        html.Div([dcc.Dropdown(id="deliveries-receiver", options=sorted({*receivers, *chosen}), multi=True,
                               placeholder="Receiver", value=chosen),
                  dcc.Dropdown(id="deliveries-state", multi=True, placeholder="State",
                               options=[{"label": label, "value": state}
                                        for state, label in views.DELIVERY_STATES.items()],
                               value=[s for s in _listed(query, "state") if s in views.DELIVERY_STATES])],
                 className="controls"),
        html.Div(id="deliveries-body"),
    ])


def _identity_page() -> html.Div:
    return html.Div([
        html.H1("Identity & routing"),
        html.Div(dcc.Checklist(id="identity-show-all", options=[{"label": " list every target", "value": "all"}],
                               value=[]), className="controls"),
        html.Div(id="identity-body"),
    ])


def _pipeline_page() -> html.Div:
    return html.Div([html.H1("Pipeline"),
                     dcc.Graph(id="pipeline-charts", config={"displaylogo": False}, className="panel",
                               responsive=True, style={"height": "460px"}),
                     html.Div(id="pipeline-body")])


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


def _register_callbacks(app: Dash, engine: Engine, pages: Pages) -> None:
    tag_options = pages.tag_options()

    @app.callback(Output("page", "children"), Input("url", "pathname"), State("url", "search"))
    def route(pathname: str | None, search: str | None) -> html.Div:
        path = app.strip_relative_path(pathname or "/") or ""
        query = _query(search)
        if path == "":
            return _overview_page(tag_options, pages.default_group, query)
        if path == "alerts":
            return _alerts_page(queries.alert_rules(engine), query)
        if path == "deliveries":
            return _deliveries_page(queries.delivery_receivers(engine), query)
        if path == "identity":
            return _identity_page()
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

    tag_filter = {"type": _TAG, "key": ALL}

    @app.callback(Output("overview-summary", "children"), Output("fleet-map", "children"),
                  Output("fleet-map-key", "data"), Output("overview-body", "children"),
                  Input("tick", "n_intervals"), Input("search", "value"), Input("show-healthy", "value"),
                  Input("map-group", "value"), Input(tag_filter, "value"), State(tag_filter, "id"),
                  State("fleet-map-key", "data"))
    def overview(_n: int | None, search: str | None, show: list[str] | None, group: str | None,
                 tag_values: list[list[str] | None], tag_ids: list[dict[str, str]],
                 shown_key: str | None) -> tuple[Any, ...]:
        selected = {i["key"]: v or [] for i, v in zip(tag_ids, tag_values, strict=True)}
        return pages.overview(search or "", bool(show), selected, group, shown_key)

    app.clientside_callback(
        _replace_query_js(app.get_relative_path("/"), """
        const [search, show, group, tagValues, tagIds] = args;
        (tagIds || []).forEach((id, i) => (tagValues[i] || []).forEach(v => q.append(id.key, v)));
        if (search) { q.set("q", search); }
        if (show && show.length) { q.set("healthy", "1"); }
        if (group !== null && group !== undefined && group !== DEFAULT_GROUP) { q.set("group", group); }
        """.replace("DEFAULT_GROUP", json.dumps(pages.default_group))),
        Input("search", "value"), Input("show-healthy", "value"), Input("map-group", "value"),
        Input(tag_filter, "value"), State(tag_filter, "id"))

    @app.callback(Output("cluster-body", "children"), Output("cluster-timeline", "figure"),
                  Input("tick", "n_intervals"), State("url", "pathname"))
    def cluster(_n: int | None, pathname: str | None) -> tuple[html.Div, go.Figure]:
        return pages.cluster(_cluster_id(app, pathname) or "")

    @app.callback(Output("alerts-body", "children"), Input("tick", "n_intervals"),
                  Input("alerts-rule", "value"), Input("alerts-severity", "value"),
                  Input("alerts-cluster", "value"), Input("alerts-id", "value"), Input("silence-result", "children"))
    def alerts(_n: int | None, rules: list[str] | None, severities: list[str] | None,
               cluster: str | None, alert_id: str | None, _silenced: Any) -> html.Div:
        return pages.alerts(rules or (), severities or (), cluster or "", alert_id or "")

    @app.callback(Output("silence-result", "children"), Input({"type": "silence", "alert": ALL}, "n_clicks"),
                  State("silence-reason", "value"), prevent_initial_call=True)
    def silence(_clicks: list[int | None], reason: str | None) -> str:
        # A refresh re-renders the buttons (n_clicks 0): only a real click counts.
        clicked = [json.loads(t["prop_id"].rsplit(".", 1)[0]) for t in ctx.triggered if t.get("value")]
        if not clicked:
            return no_update
        auth = flask.request.authorization
        who = f"dashboard ({auth.username})" if auth is not None and auth.username else "dashboard"
        return pages.silence(clicked[0]["alert"], reason or "", who)

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
        return pages.deliveries(receivers or (), states or ())

    app.clientside_callback(
        _replace_query_js(app.get_relative_path("/deliveries"), """
        const [receivers, states] = args;
        (receivers || []).forEach(v => q.append("receiver", v));
        (states || []).forEach(v => q.append("state", v));"""),
        Input("deliveries-receiver", "value"), Input("deliveries-state", "value"))

    @app.callback(Output("identity-body", "children"), Input("tick", "n_intervals"),
                  Input("identity-show-all", "value"))
    def identity(_n: int | None, show_all: list[str] | None) -> html.Div:
        return pages.identity(bool(show_all))

    @app.callback(Output("pipeline-charts", "figure"), Output("pipeline-body", "children"),
                  Input("tick", "n_intervals"))
    def pipeline(_n: int | None) -> tuple[go.Figure, html.Div]:
        return pages.pipeline()


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
