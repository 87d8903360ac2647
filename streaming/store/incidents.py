"""Fleet incidents over the store: the fleet's places (its brokers' racks and addresses, the
configured tags) and the recent alerts, grouped by `streaming.detect.group_incidents`. Computed
when asked (by the notifier, /metrics, the dashboard), never stored: the alerts table is the one
truth, and an incident is what the grouping makes of it now."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from sqlalchemy import Engine, func, select

from streaming.config import FleetwatchConfig, IncidentSettings
from streaming.detect import ClusterPlace, FleetIncident, GroupingRules, group_incidents, places_of
from streaming.records.alert import Alert
from streaming.store.job_tables import alerts, brokers, clusters, targets

__all__ = ["Configured", "IncidentScope", "fleet_incidents", "fleet_places", "grouping_rules", "recent_alerts",
           "recent_incidents"]

# A configured cluster as the grouping needs it: (name, expected cluster id, tags).
Configured = Iterable[tuple[str, str | None, Mapping[str, str]]]


@dataclass(frozen=True)
class IncidentScope:
    """What the grouping needs beyond the store: the `incidents:` settings and the configured
    clusters (name, expected cluster id, tags). The notifier, /metrics and the dashboard group with
    the same scope, so that they show the same incidents."""

    settings: IncidentSettings = field(default_factory=IncidentSettings)
    configured: tuple[tuple[str, str | None, Mapping[str, str]], ...] = ()

    @classmethod
    def of(cls, config: FleetwatchConfig) -> IncidentScope:
        return cls(config.incidents, tuple((c.name, c.expected_cluster_id, c.tags) for c in config.clusters))
# The most alerts one grouping reads (the newest): /metrics and the dashboard stay cheap in a storm.
MAX_ALERTS = 5000


def grouping_rules(settings: IncidentSettings) -> GroupingRules:
    return GroupingRules(settings.window_ms, settings.min_clusters, settings.max_domain_share, settings.min_hit_share,
                         settings.domains)


def fleet_places(engine: Engine, configured: Configured = ()) -> dict[str, ClusterPlace]:
    """Every cluster the store or the configuration knows, with its brokers' places and tags."""
    with engine.connect() as conn:
        rows = [dict(r._mapping) for r in conn.execute(
            select(brokers.c.cluster_id, brokers.c.broker_id, brokers.c.rack, brokers.c.endpoints))]
        names = {r.cluster_id: r.target for r in conn.execute(select(clusters.c.cluster_id, clusters.c.target))}
        for r in conn.execute(select(targets.c.target, targets.c.pinned_cluster_id, targets.c.last_cluster_id)):
            cluster_id = r.pinned_cluster_id or r.last_cluster_id
            if cluster_id:
                names.setdefault(cluster_id, r.target)
    return places_of(rows, {k: v for k, v in names.items() if k}, configured)


def recent_alerts(engine: Engine, since_ms: int, limit: int = MAX_ALERTS) -> list[Alert]:
    """The alerts (their latest state) that started at `since_ms` or later, the newest `limit`."""
    stmt = (select(alerts.c.alert_id, alerts.c.rule, alerts.c.status, alerts.c.severity, alerts.c.cluster_id,
                   alerts.c.target, alerts.c.broker_id, alerts.c.endpoint, alerts.c.starts_at, alerts.c.ends_at,
                   alerts.c.summary, alerts.c.details, alerts.c.cluster_name, alerts.c.tags, alerts.c.broker_host,
                   alerts.c.rack)
            .where(alerts.c.starts_at >= since_ms).order_by(alerts.c.starts_at.desc()).limit(limit))
    out = []
    with engine.connect() as conn:
        for row in conn.execute(stmt):
            try:
                out.append(Alert.from_dict(dict(row._mapping)))
            except KeyError:  # a rule this version does not know (a newer job's): in no incident
                continue
    return out


def fleet_incidents(engine: Engine, settings: IncidentSettings, since_ms: int, configured: Configured = (),
                    places: Mapping[str, ClusterPlace] | None = None) -> list[FleetIncident]:
    """The fleet incidents among the alerts that started at `since_ms` or later."""
    if not settings.enabled:
        return []
    places = fleet_places(engine, configured) if places is None else places
    return group_incidents(recent_alerts(engine, since_ms), places, grouping_rules(settings))


def recent_incidents(engine: Engine, scope: IncidentScope, lookback_ms: int) -> list[FleetIncident]:
    """The fleet incidents among the alerts that started within `lookback_ms` of the newest one
    (the fleet's own clock, not the reader's: a replayed store shows its incidents too)."""
    with engine.connect() as conn:
        newest = conn.scalar(select(func.max(alerts.c.starts_at)))
    if newest is None:
        return []
    return fleet_incidents(engine, scope.settings, int(newest) - lookback_ms, scope.configured)
