"""Each page's skeleton (its controls, and the empty boxes its data callback fills), the frame
around every page, and the URL query string the controls start from.

A page opened from a pasted link (`/alerts?rule=broker.fenced&severity=critical`) starts with
its controls set from the query string.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import parse_qs

from dash import dcc, html

from dashboard.queries.shared import SEVERITIES
from dashboard.views.deliveries import DELIVERY_STATES
from dashboard.views.elements import Href

__all__ = [
    "TAG_FILTER",
    "Query",
    "alerts_layout",
    "cluster_layout",
    "deliveries_layout",
    "frame_layout",
    "identity_layout",
    "incidents_layout",
    "not_found_layout",
    "overview_layout",
    "parse_query",
    "pipeline_layout",
    "validation_layout",
]

# The type of the overview's tag filter dropdowns' ids ({"type": TAG_FILTER, "key": <tag key>}).
TAG_FILTER = "tag-filter"

Query = dict[str, list[str]]


def frame_layout(href: Href, refresh_ms: int) -> html.Div:
    """What every page sits in: the address, the refresh interval, the navigation with the store's
    status, and the page's box."""
    return html.Div([
        dcc.Location(id="url"),
        dcc.Interval(id="tick", interval=refresh_ms),
        html.Nav([dcc.Link("fleetwatch", href=href("/"), className="brand"),
                  dcc.Link("Fleet", href=href("/")), dcc.Link("Alerts", href=href("/alerts")),
                  dcc.Link("Incidents", href=href("/incidents")),
                  dcc.Link("Deliveries", href=href("/deliveries")),
                  dcc.Link("Identity & routing", href=href("/identity")),
                  dcc.Link("Pipeline", href=href("/pipeline")),
                  html.Span(id="status", className="status")]),
        html.Main(id="page"),
    ])


def validation_layout(frame: html.Div, tag_options: Mapping[str, list[str]], default_group: str) -> html.Div:
    """The frame and every page's controls, so Dash can check callbacks against components not yet shown."""
    return html.Div([frame, overview_layout(tag_options, default_group, {}), cluster_layout(),
                     alerts_layout([], {}), deliveries_layout([], {}), identity_layout(), pipeline_layout(),
                     incidents_layout()])


def not_found_layout() -> html.Div:
    """The page of a URL that names none."""
    return html.Div([html.H1("Not found"), html.P("No such page.", className="muted")])


def parse_query(search: str | None) -> Query:
    """A URL's query string as lists of values; "a,b" counts as two values of a list filter.
    An empty value is kept: `group=` asks for no grouping."""
    return parse_qs((search or "").removeprefix("?"), keep_blank_values=True)


def _listed(query: Query, key: str) -> list[str]:
    return [part for value in query.get(key, []) for part in value.split(",") if part]


def overview_layout(tag_options: Mapping[str, list[str]], default_group: str, query: Query) -> html.Div:
    tag_filters = [html.Div(dcc.Dropdown(id={"type": TAG_FILTER, "key": key}, options=values, multi=True,
                                         placeholder=key, value=[v for v in query.get(key, []) if v in values]),
                            className="tag-filter", **{"data-tag": key})
                   for key, values in tag_options.items()]
    group = query.get("group", [default_group])[0]
    group_options = [{"label": "no grouping", "value": ""}, *({"label": f"group by {k}", "value": k}
                                                               for k in tag_options)]
    return html.Div([
        html.H1("Fleet"),
        html.Div(id="overview-summary"),
        html.Div([dcc.Input(id="search", type="search", placeholder="Search cluster name, tag or id",
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


def cluster_layout() -> html.Div:
    return html.Div([
        html.Div(id="cluster-body"),
        html.H2("Broker states over time"),
        dcc.Graph(id="cluster-timeline", config={"displaylogo": False}, className="panel"),
    ])


def alerts_layout(rules: list[str], query: Query) -> html.Div:
    chosen_rules = _listed(query, "rule")
    return html.Div([
        html.H1("Alerts"),
        html.Div([dcc.Dropdown(id="alerts-rule", options=sorted({*rules, *chosen_rules}), multi=True,
                               placeholder="Rule", value=chosen_rules),
                  dcc.Dropdown(id="alerts-severity", options=list(SEVERITIES), multi=True,
                               placeholder="Severity",
                               value=[s for s in _listed(query, "severity") if s in SEVERITIES]),
                  dcc.Input(id="alerts-cluster", type="search", placeholder="Cluster name, tag or id",
                            autoComplete="off", value=query.get("cluster", [""])[0]),
                  html.Div(dcc.Input(id="alerts-id", type="search", placeholder="Alert id", autoComplete="off",
                                     value=query.get("alert", [""])[0]), className="alert-id-filter")],
                 className="controls"),
        html.Div([dcc.Input(id="silence-reason", type="text", autoComplete="off", maxLength=500,
                            placeholder="Reason for a silence (e.g. planned rolling restart)"),
                  html.Span(id="silence-result", className="muted")], className="controls"),
        html.Div(id="alerts-body"),
    ])


def deliveries_layout(receivers: list[str], query: Query) -> html.Div:
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
                                        for state, label in DELIVERY_STATES.items()],
                               value=[s for s in _listed(query, "state") if s in DELIVERY_STATES])],
                 className="controls"),
        html.Div(id="deliveries-body"),
    ])


def incidents_layout() -> html.Div:
    return html.Div([html.H1("Fleet incidents"),
                     html.P("Alerts of several clusters that started within a window and share a failure domain "
                            "(rack, host, subnet, DNS zone, configured tag).", className="muted"),
                     html.Div(id="incidents-body")])


def identity_layout() -> html.Div:
    return html.Div([
        html.H1("Identity & routing"),
        html.Div(dcc.Checklist(id="identity-show-all", options=[{"label": " list every target", "value": "all"}],
                               value=[]), className="controls"),
        html.Div(id="identity-body"),
    ])


def pipeline_layout() -> html.Div:
    return html.Div([html.H1("Pipeline"),
                     dcc.Graph(id="pipeline-charts", config={"displaylogo": False}, className="panel",
                               responsive=True, style={"height": "460px"}),
                     html.Div(id="pipeline-body")])
