"""The incidents page's query: the fleet incidents (streaming/detect/README.md, "Fleet incidents")
among the alerts of the last `LOOKBACK_MS` of the fleet clock, newest first, with their members."""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import Engine

from dashboard.queries.shared import Row
from streaming.config import IncidentSettings
from streaming.store import IncidentScope, recent_incidents

__all__ = ["LOOKBACK_MS", "incident_list"]

LOOKBACK_MS = 7 * 86_400_000


def incident_list(engine: Engine, tags: Mapping[str, Mapping[str, str]] | None = None,
                  settings: IncidentSettings | None = None, limit: int = 100) -> list[Row]:
    """Incidents (newest start first) as rows: id, status, domain, start, end, clusters, members
    (each an alert row: id, rule, severity, cluster id, target, broker, start, end). `tags` are the
    configured clusters' tags by target name (the dashboard's --config)."""
    configured = tuple((name, None, t) for name, t in (tags or {}).items())
    found = recent_incidents(engine, IncidentScope(settings or IncidentSettings(), configured), LOOKBACK_MS)
    return [{"incident_id": i.incident_id, "status": i.status, "domain": str(i.domain), "starts_at": i.starts_at,
             "ends_at": i.ends_at, "clusters": list(i.clusters),
             "members": [{"alert_id": m.alert_id, "rule": m.rule, "severity": m.severity, "cluster_id": m.cluster_id,
                          "cluster_name": m.cluster_name, "target": m.target, "broker_id": m.broker_id,
                          "starts_at": m.starts_at, "ends_at": m.ends_at}
                         for m in sorted(i.members, key=lambda m: ((m.cluster_name or m.target or "").lower(),
                                                                   m.starts_at, m.alert_id))]}
            for i in sorted(found, key=lambda i: (-i.starts_at, i.incident_id))[:limit]]
