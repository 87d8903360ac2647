"""The store: the one database the job, the notifier, the dashboard and the CLI share.

- `Store` (database.py): the connection, schema creation and upgrade, the job's idempotent
  writes (`write_batch`, `record_alerts`), the detection state's reset (`orphan_open_alerts`,
  `resolve_orphaned_alerts`), the job's retention (`delete_expired`), and an operator's
  resolution of a stuck alert (`resolve_by_hand`, `alerts_newest_first`: `fleetwatch alerts`).
- The tables, by the process that writes them: the job's (job_tables.py: alerts and their
  history, the outbox, the fleet's state, quarantine, progress, the collectors' clocks) and the
  notifier's (notifier_tables.py: deliveries, its lease, silences), all in `metadata`. The
  quarantine's bounds (quarantine_bounds.py: `fit_raw`, `RAW_MAX_BYTES`, `reason_group`, and the
  table's row cap, which `write_batch` keeps).
- The notifier's queries and writes (delivery_queue.py: `DeliveryQueue`, whose reads carry each
  outbox body read once, outbox_bodies.py; delivery_states.py: the states of a delivery), its lease
  (leasing.py: `try_lease`, `release_lease`), its retention (notification_retention.py), and
  silences (silencing.py: written by `fleetwatch silence` and the dashboard, applied by the notifier).
- The detection's second pass's state, written with each micro-batch (second_pass_state.py:
  `SecondPassWrite`; `Store.second_pass_buckets` reads it back).
- The numbers /metrics and the console's status line show (gauges.py).
- Fleet incidents over the store (incidents.py: `fleet_incidents`, `fleet_places`): the alerts
  grouped by shared failure domain, computed when asked, for the notifier, /metrics, the dashboard.
"""

from __future__ import annotations

from streaming.store.database import Store
from streaming.store.delivery_queue import (
    NO_RECEIVER,
    DeliveredFiring,
    DeliveryQueue,
    LeaseFence,
    OutboxEntry,
    QueuedDelivery,
    StateChange,
)
from streaming.store.delivery_states import DEAD, DELIVERED, FINAL_OK, HELD, PENDING, SILENCED, SUPERSEDED
from streaming.store.gauges import (
    FleetRows,
    StatusCounts,
    firing_broker_details,
    fleet_rows,
    source_clock_rows,
    status_counts,
)
from streaming.store.incidents import (
    Configured,
    IncidentScope,
    fleet_incidents,
    fleet_places,
    grouping_rules,
    recent_alerts,
    recent_incidents,
)
from streaming.store.job_tables import (
    alert_history,
    alerts,
    broker_transitions,
    brokers,
    clusters,
    controller_history,
    job_checkpoints,
    job_restarts,
    metadata,
    outbox,
    pipeline_progress,
    quarantine,
    source_clocks,
    targets,
)
from streaming.store.leasing import LeaseClaim, LeaseHolder, LeaseTry, release_lease, try_lease
from streaming.store.notification_retention import RetentionCounts, delete_expired_notifications
from streaming.store.notifier_tables import deliveries, notifier_lease, silences
from streaming.store.outbox_bodies import NotAnAlert
from streaming.store.quarantine_bounds import RAW_MAX_BYTES, fit_raw, reason_group
from streaming.store.second_pass_state import SecondPassWrite
from streaming.store.silencing import (
    Silence,
    active_silences,
    add_silence,
    expire_silence,
    list_silences,
    parse_duration,
)

__all__ = [
    "DEAD",
    "DELIVERED",
    "FINAL_OK",
    "HELD",
    "NO_RECEIVER",
    "PENDING",
    "RAW_MAX_BYTES",
    "SILENCED",
    "SUPERSEDED",
    "Configured",
    "DeliveredFiring",
    "DeliveryQueue",
    "FleetRows",
    "IncidentScope",
    "LeaseClaim",
    "LeaseFence",
    "LeaseHolder",
    "LeaseTry",
    "NotAnAlert",
    "OutboxEntry",
    "QueuedDelivery",
    "RetentionCounts",
    "SecondPassWrite",
    "Silence",
    "StateChange",
    "StatusCounts",
    "Store",
    "active_silences",
    "add_silence",
    "alert_history",
    "alerts",
    "broker_transitions",
    "brokers",
    "clusters",
    "controller_history",
    "delete_expired_notifications",
    "deliveries",
    "expire_silence",
    "firing_broker_details",
    "fit_raw",
    "fleet_incidents",
    "fleet_places",
    "fleet_rows",
    "grouping_rules",
    "job_checkpoints",
    "job_restarts",
    "list_silences",
    "metadata",
    "notifier_lease",
    "outbox",
    "parse_duration",
    "pipeline_progress",
    "quarantine",
    "reason_group",
    "recent_alerts",
    "recent_incidents",
    "release_lease",
    "silences",
    "source_clock_rows",
    "source_clocks",
    "status_counts",
    "targets",
    "try_lease",
]
