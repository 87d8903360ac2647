"""The tables the streaming job writes (`fleetwatch run`, `replay` with a store): the alerts, their
history and the outbox, the fleet's last known state and its changes, quarantine, progress and
the clocks of the collectors (`source_clocks`).

`metadata` holds every table of the store: the notifier's are in `notifier_tables`.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

__all__ = [
    "alert_history",
    "alerts",
    "broker_transitions",
    "brokers",
    "clusters",
    "controller_history",
    "job_checkpoints",
    "job_restarts",
    "metadata",
    "outbox",
    "pipeline_progress",
    "quarantine",
    "second_pass_state",
    "source_clocks",
    "targets",
]

metadata = MetaData()

# Current state of every alert (one row per alert_id: firing or resolved).
alerts = Table(
    "alerts", metadata,
    Column("alert_id", String(64), primary_key=True),
    Column("rule", String(64), nullable=False, index=True),
    Column("severity", String(16), nullable=False),
    Column("status", String(16), nullable=False, index=True),
    Column("cluster_id", String(255), index=True),
    Column("target", String(255)),
    Column("broker_id", Integer),
    Column("endpoint", String(512)),
    Column("starts_at", BigInteger, nullable=False),
    Column("ends_at", BigInteger),
    Column("summary", Text, nullable=False),
    Column("details", JSON, nullable=False),
    Column("recorded_at", BigInteger, nullable=False),
    # Set when the detection state was reset while the alert was open (`orphan_open_alerts`);
    # cleared when the new state fires it again.
    Column("orphaned_at", BigInteger),
    # Set when the reset was settled and the alert had started before the oldest telemetry the new
    # state read: it stays firing until the new state ends it (streaming/detect/carried.py).
    Column("carried_over_at", BigInteger),
    # The names the alert fired with (issue 43; null for an alert recorded before them).
    Column("cluster_name", String(255)),
    Column("tags", JSON),
    Column("broker_host", String(512)),
    Column("rack", String(255)),
    # The resolved list (newest ended first) and the retention of resolved alerts.
    Index("ix_alerts_status_ends_at", "status", "ends_at"),
)

# Every (alert_id, status) ever emitted, with the exact alert object (SPEC section 4).
alert_history = Table(
    "alert_history", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("alert_id", String(64), nullable=False),
    Column("status", String(16), nullable=False),
    Column("event_ms", BigInteger, nullable=False, index=True),
    Column("body", Text, nullable=False),
    Column("recorded_at", BigInteger, nullable=False),
    UniqueConstraint("alert_id", "status", name="uq_alert_history"),
)

# What the notifier has to deliver: one row per (alert_id, status).
outbox = Table(
    "outbox", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("alert_id", String(64), nullable=False),
    Column("status", String(16), nullable=False),
    Column("subject", String(600), nullable=False),
    Column("body", Text, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("delivered_at", BigInteger),
    Column("attempts", Integer, nullable=False, default=0),
    Column("last_error", Text),
    UniqueConstraint("alert_id", "status", name="uq_outbox"),
    # The notifier's plan() looks for rows not delivered yet every second; retention for old ones.
    Index("ix_outbox_delivered_at", "delivered_at"),
)

brokers = Table(
    "brokers", metadata,
    Column("cluster_id", String(255), primary_key=True),
    Column("broker_id", Integer, primary_key=True),
    Column("state", String(16)),
    Column("fenced", Boolean),
    Column("broker_epoch", BigInteger),
    Column("last_heartbeat_ms", BigInteger),
    Column("last_answer_ms", BigInteger),
    Column("rack", String(255)),
    Column("endpoints", JSON, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
    Index("ix_brokers_updated_ms", "updated_ms"),  # retention
)

broker_transitions = Table(
    "broker_transitions", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("cluster_id", String(255), nullable=False),
    Column("broker_id", Integer, nullable=False),
    Column("ts", BigInteger, nullable=False),
    Column("state", String(16), nullable=False),
    Column("previous_state", String(16)),
    Column("reason", Text),
    UniqueConstraint("cluster_id", "broker_id", "ts", "state", name="uq_transition"),
    Index("ix_broker_transitions_ts", "ts"),  # retention
)

clusters = Table(
    "clusters", metadata,
    Column("cluster_id", String(255), primary_key=True),
    Column("target", String(255)),
    Column("controller_id", Integer),
    Column("last_response_ms", BigInteger),
    Column("updated_ms", BigInteger, nullable=False),
    Index("ix_clusters_updated_ms", "updated_ms"),  # retention
)

# Every change of the controller a cluster's responses report (None: no active controller).
controller_history = Table(
    "controller_history", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("cluster_id", String(255), nullable=False, index=True),
    Column("ts", BigInteger, nullable=False),
    Column("controller_id", Integer),
    UniqueConstraint("cluster_id", "ts", name="uq_controller_change"),
    Index("ix_controller_history_ts", "ts"),  # retention
)

targets = Table(
    "targets", metadata,
    Column("target", String(255), primary_key=True),
    Column("pinned_cluster_id", String(255)),
    Column("last_cluster_id", String(255)),
    Column("last_ok_ms", BigInteger),
    Column("last_error", String(255)),
    Column("last_error_ms", BigInteger),
    Column("updated_ms", BigInteger, nullable=False),
    Index("ix_targets_updated_ms", "updated_ms"),  # retention
)

quarantine = Table(
    "quarantine", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("origin", String(512), nullable=False, unique=True),
    Column("reason", String(255), nullable=False, index=True),
    Column("raw", Text),
    Column("recorded_at", BigInteger, nullable=False, index=True),
    # What exactly was wrong (e.g. "in the future: ..."), beside the bounded reason code.
    Column("detail", Text),
    # The event's `source` (its collector) when it was refused for a `ts` ahead of the clock
    # (ts_ahead_of_clock, ts_out_of_range in the future): what each source had refused.
    Column("source", String(255)),
    # The message's size in bytes: over quarantine_bounds.RAW_MAX_BYTES, `raw` holds its beginning
    # only (null: a row of a version before the bound, or no message at all).
    Column("raw_bytes", BigInteger),
    # Messages of this row's reason group (quarantine_bounds.reason_group) in its micro-batch beyond
    # `retention.quarantine_rows_per_reason`: counted here, not stored (null: none).
    Column("not_stored", BigInteger),
)

# How far each collector's event times lead the job's clock (streaming/detect/README.md, "Input
# bounds"): one row per `source`, from the latest micro-batch that had its events. `lead_ms`: its
# largest event time minus the job's clock, the batch's timestamp (negative: the delivery delay of a clock
# in step); `events` and `ahead` (refused for a `ts` ahead of the clock): in that batch. At most
# MAX_TRACKED_SOURCES rows (streaming/pipeline/parse.py): the writer keeps the most recent.
source_clocks = Table(
    "source_clocks", metadata,
    Column("source", String(255), primary_key=True),
    Column("lead_ms", BigInteger, nullable=False),
    Column("events", BigInteger, nullable=False),
    Column("ahead", BigInteger, nullable=False),
    Column("updated_ms", BigInteger, nullable=False, index=True),  # the cap, retention
)

pipeline_progress = Table(
    "pipeline_progress", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("query", String(255), nullable=False),
    Column("batch_id", BigInteger, nullable=False),
    Column("recorded_at", BigInteger, nullable=False),
    Column("input_rows", BigInteger, nullable=False),
    Column("input_rows_per_s", JSON),
    Column("processed_rows_per_s", JSON),
    Column("batch_duration_ms", BigInteger),
    Column("watermark_ms", BigInteger),
    Column("state_rows", BigInteger),
    Column("state_memory_bytes", BigInteger),
    UniqueConstraint("query", "batch_id", name="uq_progress"),
    Index("ix_pipeline_progress_recorded_at", "recorded_at"),  # the pipeline page, retention
    Index("ix_pipeline_progress_query_id", "query", "id"),  # /metrics: the latest row of each query
)

# Which Spark checkpoint wrote the open alerts: a job started on another (or an empty) one has
# lost the detection state that would resolve them (`resolve_open_alerts`).
job_checkpoints = Table(
    "job_checkpoints", metadata,
    Column("query", String(255), primary_key=True),
    Column("checkpoint_id", String(64), nullable=False),
    Column("recorded_at", BigInteger, nullable=False),
)

# How often the job restarted its failed streaming query (`fleetwatch run`'s supervisor), over every
# run: one row per query, only ever counted up, so /metrics serves it as a counter.
job_restarts = Table(
    "job_restarts", metadata,
    Column("query", String(255), primary_key=True),
    Column("restarts", BigInteger, nullable=False),
    Column("last_failure_ms", BigInteger, nullable=False),
    Column("last_error", Text, nullable=False),
)


# Detection's second pass, which the job's driver runs (streaming/detect/second_pass.py): each of its
# buckets' engines as micro-batch `batch_id` of the checkpoint left them, written with that batch
# (second_pass_state.py keeps the two newest of each bucket: a batch run again reads the one before it).
second_pass_state = Table(
    "second_pass_state", metadata,
    Column("query", String(255), primary_key=True),
    Column("checkpoint_id", String(64), primary_key=True),
    Column("bucket", Integer, primary_key=True),
    Column("batch_id", BigInteger, primary_key=True),
    Column("engines", LargeBinary),  # null: the bucket has no shard left
)
