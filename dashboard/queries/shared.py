"""What every page's queries share: the fleet clock, severity ranks, how an alert is attributed
to a cluster, and reading rows."""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, Engine, Select, case, func, select

from streaming.records.alert import SEVERITIES
from streaming.store import alerts, brokers, targets

__all__ = [
    "SEVERITIES",
    "STATES",
    "Row",
    "alerts_with_target",
    "attributed_cluster",
    "fetch_rows",
    "fleet_clock",
    "fleet_clock_ms",
    "severity_of_rank",
    "severity_rank",
]

Row = dict[str, Any]

# The rank orders clusters and alerts by severity: the worst has the highest.
_RANK = {severity: len(SEVERITIES) - i for i, severity in enumerate(SEVERITIES)}
STATES = ("ONLINE", "FENCED", "STOPPING", "OFFLINE")


def severity_rank(severity: ColumnElement[Any]) -> ColumnElement[int]:
    """A severity column as its rank (3 critical ... 0 none), to order and compare in SQL."""
    return case(_RANK, value=severity, else_=0)


def severity_of_rank(rank: int | None) -> str | None:
    """The severity of a rank from `severity_rank`, None for no severity."""
    return next((name for name, r in _RANK.items() if r == rank), None)


# Target alerts (cluster.unreachable, cluster.id_invalid...) may carry no cluster id: they are
# attributed through the target's pinned or last seen id, so the cluster they hurt turns red.
alerts_with_target = alerts.outerjoin(targets, targets.c.target == alerts.c.target)
attributed_cluster = func.coalesce(alerts.c.cluster_id, targets.c.pinned_cluster_id,
                                   targets.c.last_cluster_id)


def fleet_clock() -> ColumnElement[int]:
    """The fleet clock (`fleet_clock_ms`) inside a statement, to measure ages against."""
    return select(func.max(brokers.c.updated_ms)).scalar_subquery()


def fetch_rows(engine: Engine, stmt: Select[Any]) -> list[Row]:
    with engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(stmt)]


def fleet_clock_ms(engine: Engine) -> int | None:
    """The fleet clock: the newest broker update, or None for an empty store."""
    with engine.connect() as conn:
        return conn.scalar(select(func.max(brokers.c.updated_ms)))
