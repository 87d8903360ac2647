"""The tables the notifier writes (streaming/notify): its deliveries, its lease, and the silences
that `fleetwatch silence` and the dashboard write and it applies."""

from __future__ import annotations

from sqlalchemy import BigInteger, Boolean, Column, Index, Integer, String, Table, Text, UniqueConstraint

from streaming.store.job_tables import metadata

__all__ = ["deliveries", "notifier_lease", "silences"]

# The notifier's work (streaming/notify): one row per (outbox row, receiver) chosen by the routes,
# sent in outbox order per (receiver, subject, rule). state: pending (to send at next_attempt_at),
# delivered (after a 2xx), dead (a permanent failure or a retry limit: dead_letter true, the reason
# in last_error), held (a firing held by silence_id, decided again at next_attempt_at, its end),
# silenced (for good, by silence_id) or superseded (a requeued dead firing whose resolution had
# already been delivered). Errors are redacted before they are stored. incident_id and
# incident_domain (`<kind>:<value>`): the fleet incident a unit was delivered under, so that a
# member's resolve and Alertmanager's refresh name what its firing named (PagerDuty's dedup key,
# Alertmanager's labels), after a restart too; NULL when it went on its own (and in older stores).
deliveries = Table(
    "deliveries", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("outbox_id", Integer, nullable=False, index=True),
    Column("receiver", String(255), nullable=False),
    Column("alert_id", String(64), nullable=False, index=True),
    Column("status", String(16), nullable=False),
    Column("rule", String(64), nullable=False),
    Column("subject", String(600), nullable=False),
    Column("group_key", String(600), nullable=False),
    Column("state", String(16), nullable=False),
    Column("attempts", Integer, nullable=False, default=0),
    Column("next_attempt_at", BigInteger, nullable=False),
    Column("last_attempt_at", BigInteger),
    Column("last_error", Text),
    Column("dead_letter", Boolean, nullable=False, default=False),
    Column("silence_id", String(64)),
    Column("created_at", BigInteger, nullable=False),
    Column("delivered_at", BigInteger),
    Column("incident_id", String(64)),
    Column("incident_domain", String(600)),
    UniqueConstraint("outbox_id", "receiver", name="uq_delivery"),
    Index("ix_deliveries_due", "receiver", "state", "next_attempt_at"),
    Index("ix_deliveries_queue", "receiver", "subject", "rule", "state", "outbox_id"),
)

# Silences (`fleetwatch silence`): every given matcher must match; ends_at is set to the
# expiry time by `silence expire`.
silences = Table(
    "silences", metadata,
    Column("id", String(64), primary_key=True),
    Column("cluster", String(255)),
    Column("rule", String(255)),
    Column("broker_id", Integer),
    Column("target", String(255)),
    Column("endpoint", String(512)),
    Column("starts_at", BigInteger, nullable=False),
    Column("ends_at", BigInteger, nullable=False),
    Column("reason", Text, nullable=False),
    Column("created_by", String(255)),
    Column("created_at", BigInteger, nullable=False),
    Column("expired_at", BigInteger),
    Index("ix_silences_ends_at", "ends_at"),
)

# One notifier at a time per store (per-subject order): who holds the lease, until when (epoch ms
# of the database's own clock, never a host's), and its generation: the fencing token, one more
# at every takeover, that the write recording a send checks (streaming/notify/lease.py). Nullable
# so that an older store gets it (as NULL, read as 0).
notifier_lease = Table(
    "notifier_lease", metadata,
    Column("name", String(64), primary_key=True),
    Column("owner", String(64), nullable=False),
    Column("host", String(255), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("acquired_at", BigInteger, nullable=False),
    Column("expires_at", BigInteger, nullable=False),
    Column("generation", BigInteger),
)
