"""What each page shows, as plain functions of its controls' values (the Dash callbacks return
these; bench/dashboard_callbacks.py times them), and the silence the alerts page adds."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
from dash import html, no_update

from dashboard.queries.alerts import active_silences, alert, alert_list, cluster_alerts
from dashboard.queries.cluster import blast_radius, broker_timeline, cluster_brokers, cluster_info, controller_changes
from dashboard.queries.deliveries import delivery_counts, delivery_list
from dashboard.queries.fleet import fleet_overview, fleet_summary, tagged_targets, worst_alerts
from dashboard.queries.identity import endpoint_alerts, target_registry
from dashboard.queries.incidents import incident_list
from dashboard.queries.pipeline import (
    outbox_backlog,
    pipeline_batches,
    pipeline_series,
    quarantine_reasons,
    source_clock_rows,
)
from dashboard.queries.shared import SEVERITIES, Row, fleet_clock_ms
from dashboard.views.alerts import alerts_table
from dashboard.views.cluster import (
    blast_radius_table,
    brokers_table,
    cluster_header,
    controller_table,
    timeline_figure,
)
from dashboard.views.deliveries import deliveries_table, delivery_summary
from dashboard.views.elements import Href
from dashboard.views.fleet import fleet_map, fleet_table, summary_strip
from dashboard.views.formatting import format_ts
from dashboard.views.identity import collisions_table, misrouted_table, registry_table
from dashboard.views.incidents import incidents_view
from dashboard.views.pipeline import pipeline_figure, pipeline_tables
from streaming.config import ConfigError, IncidentSettings
from streaming.plumbing.clock import now_ms
from streaming.store import Silence, Store, add_silence

__all__ = ["SILENCE_MS", "PageContent", "Tags"]

log = logging.getLogger(__name__)

_ALERT_LIMIT = 200
_DELIVERY_LIMIT = 200
_IDENTITY_RULES = ("cluster.id_changed", "cluster.id_duplicate", "cluster.id_invalid")
SILENCE_MS = 2 * 3600_000

# A target name -> its tags (from the config).
Tags = Mapping[str, Mapping[str, str]]


class PageContent:
    """Each page's content as a plain function of its controls' values.

    The Dash callbacks return these; bench/dashboard_callbacks.py times them. `tags` maps a
    target name to its tags (from the config), None when the dashboard runs without one; `names` a
    pinned cluster id to its configured name.
    """

    def __init__(self, store: Store, href: Href, tags: Tags | None = None,
                 incidents: IncidentSettings | None = None, names: Mapping[str, str] | None = None) -> None:
        self.store = store
        self.names = dict(names or {})  # cluster id -> its configured name (by expected_cluster_id)
        self.incident_settings = incidents
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
        names = tagged_targets(self.tags, selected or {})
        rows = self._named(fleet_overview(self.engine, search, names, self._matching(search)))
        group_by = self.default_group if group_by is None else group_by
        tiles, key = fleet_map(self.href, rows, worst_alerts(self.engine), self.tags, group_by)
        # A search narrows the list enough to show healthy matches one by one.
        listed = show_healthy or bool(search.strip())
        return (summary_strip(fleet_summary(self.engine, names)),
                no_update if key == shown_key else tiles, key,
                fleet_table(self.href, rows, listed, self._tag_column))

    def _matching(self, search: str) -> tuple[set[str], set[str]]:
        """What a search matches beyond ids and targets (issue 43): the cluster ids whose configured
        name it is in, the targets one of whose tags (`key=value`) it is in."""
        needle = search.strip().lower()
        if not needle:
            return set(), set()
        return ({cid for cid, name in self.names.items() if needle in name.lower()},
                {target for target, own in self.tags.items()
                 if any(needle in f"{k}={v}".lower() for k, v in own.items())})

    def _named(self, rows: list[Row]) -> list[Row]:
        """Overview rows with each cluster's `name` (its configured one, else its target's), worst
        first and by name within a severity (issue 43)."""
        for row in rows:
            row["name"] = self.names.get(row["cluster_id"]) or row["target"]
        rank = {s: i for i, s in enumerate(SEVERITIES)}
        return sorted(rows, key=lambda r: (rank.get(r["severity"], len(rank)), -r["firing"],
                                           (r["name"] or r["cluster_id"]).lower(), r["cluster_id"]))

    def cluster(self, cluster_id: str) -> tuple[html.Div, go.Figure]:
        engine, href = self.engine, self.href
        brokers = cluster_brokers(engine, cluster_id)
        firing = cluster_alerts(engine, cluster_id, "firing")
        resolved = cluster_alerts(engine, cluster_id, "resolved", limit=20)
        clock = fleet_clock_ms(engine)
        body = html.Div([
            cluster_header(cluster_id, cluster_info(engine, cluster_id), len(brokers), self.names.get(cluster_id)),
            html.H2("Brokers"), brokers_table(brokers, firing),
            html.H2("Blast radius"), blast_radius_table(blast_radius(engine, cluster_id)),
            html.H2("Firing alerts"),
            alerts_table(href, firing, clock, table_id="cluster-firing", limit=50),
            html.H2("Controller history"),
            controller_table(controller_changes(engine, cluster_id, limit=20)),
            html.H2("Recently resolved alerts"),
            alerts_table(href, resolved, clock, table_id="cluster-resolved", limit=20),
        ])
        return body, timeline_figure(broker_timeline(engine, cluster_id), cluster_id)

    def alerts(self, rules: Sequence[str] = (), severities: Sequence[str] = (), cluster: str = "",
               alert_id: str = "") -> html.Div:
        filters: dict[str, Any] = {"rules": rules, "severities": severities, "cluster": cluster,
                                   "alert_id": alert_id, "limit": _ALERT_LIMIT}
        clock = fleet_clock_ms(self.engine)
        firing = alert_list(self.engine, "firing", **filters)
        return html.Div([
            html.H2("Firing"),
            alerts_table(self.href, firing, clock, table_id="alerts-firing", limit=_ALERT_LIMIT,
                         silenced=self.silenced(firing)),
            html.H2("Recently resolved"),
            alerts_table(self.href, alert_list(self.engine, "resolved", **filters), clock,
                         table_id="alerts-resolved", limit=_ALERT_LIMIT),
        ])

    def silenced(self, firing: list[Row]) -> dict[str, int]:
        """Firing alert id -> when the latest-ending silence in force that matches it ends."""
        found = [Silence.from_row(r) for r in active_silences(self.engine, now_ms())]
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
        a = alert(self.engine, alert_id)
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
        return f"Silence {s.id}: {s.matchers()} until {format_ts(s.ends_at)} ({s.reason})."

    def identity(self, show_all: bool = False) -> html.Div:
        engine, href = self.engine, self.href
        clock = fleet_clock_ms(engine)
        id_alerts = (alert_list(engine, "firing", rules=_IDENTITY_RULES, limit=50)
                     + alert_list(engine, "resolved", rules=_IDENTITY_RULES, limit=20))
        return html.Div([
            html.H2("Cluster-id registry"),
            registry_table(href, target_registry(engine, self.tags.keys()), show_all),
            html.H2("Misrouted endpoints"),
            misrouted_table(href, endpoint_alerts(engine, "connection.misrouted"), clock),
            html.H2("Endpoint collisions"),
            collisions_table(href, endpoint_alerts(engine, "endpoint.collision"), clock),
            html.H2("Cluster-id alerts"),
            alerts_table(href, id_alerts, clock, table_id="identity-alerts", limit=70),
        ])

    def incidents(self, incident_id: str = "") -> html.Div:
        """Fleet incidents (alerts of several clusters sharing a failure domain), newest first; only
        `incident_id`'s when given (the page a notification links)."""
        found = incident_list(self.engine, self.tags, self.incident_settings)
        if incident_id:
            found = [i for i in found if i["incident_id"] == incident_id]
        return incidents_view(self.href, found, fleet_clock_ms(self.engine))

    def deliveries(self, receivers: Sequence[str] = (), states: Sequence[str] = ()) -> tuple[html.Div, html.Div]:
        """Counts by state and the latest deliveries (receivers by name only)."""
        rows = delivery_list(self.engine, receivers=receivers, states=states, limit=_DELIVERY_LIMIT)
        return (delivery_summary(delivery_counts(self.engine)),
                deliveries_table(self.href, rows, now_ms(), _DELIVERY_LIMIT))

    def pipeline(self) -> tuple[go.Figure, html.Div]:
        return (pipeline_figure(pipeline_series(self.engine)),
                pipeline_tables(pipeline_batches(self.engine), quarantine_reasons(self.engine),
                                outbox_backlog(self.engine), now_ms(), source_clock_rows(self.engine)))
