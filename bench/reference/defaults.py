"""The SPEC's default rule settings (streaming/config/ RuleSettings), written out, and the
contract's fixed vocabulary: the reference has no config file and imports nothing from the project."""

from __future__ import annotations

import re

__all__ = [
    "CONTROLLER_FLAP_THRESHOLD", "CONTROLLER_FLAP_WINDOW", "CONTROLLER_WINDOW", "DISAGREEMENT", "EVENT_TYPES",
    "FENCED_GRACE", "FLAP_THRESHOLD", "FLAP_WINDOW", "FORGET_VIEWS_AFTER", "HEARTBEAT_INTERVAL", "LATENESS",
    "LEGAL", "PARTITION_WINDOW", "RESOLVE_AFTER", "SESSION_TIMEOUT", "SEVERITY", "STALL_AFTER", "STATE_TTL",
    "STOPPING_TIMEOUT", "UNREACHABLE", "VALID_ID",
]


LATENESS = 5000
SESSION_TIMEOUT = 9000
HEARTBEAT_INTERVAL = 2000
STALL_AFTER = 2500  # broker.stalled (issue 44): on by default
FENCED_GRACE = 30000
PARTITION_WINDOW = 15000
STOPPING_TIMEOUT = 120000
RESOLVE_AFTER = 60000
FLAP_THRESHOLD = 4
FLAP_WINDOW = 300000
CONTROLLER_WINDOW = 15000
CONTROLLER_FLAP_THRESHOLD = 3
CONTROLLER_FLAP_WINDOW = 300000
DISAGREEMENT = 30000
UNREACHABLE = 30000
FORGET_VIEWS_AFTER = 600000
STATE_TTL = 86_400_000

SEVERITY = {
    "broker.heartbeat_lost": "critical", "broker.heartbeat_late": "warning", "broker.stalled": "warning",
    "broker.fenced": "warning",
    "broker.partitioned": "critical",
    "broker.stuck_stopping": "warning", "broker.epoch_regression": "critical", "broker.flapping": "warning",
    "broker.illegal_transition": "info", "cluster.no_controller": "critical",
    "cluster.controller_flapping": "warning", "cluster.controller_disagreement": "warning",
    "cluster.partitions_offline": "critical", "cluster.under_min_isr": "warning",
    "cluster.id_changed": "critical", "cluster.id_duplicate": "critical", "cluster.id_invalid": "warning",
    "cluster.unreachable": "critical", "connection.misrouted": "critical", "endpoint.collision": "critical",
    "collector.silent": "warning",
}
LEGAL = {("OFFLINE", "FENCED"), ("FENCED", "ONLINE"), ("ONLINE", "FENCED"), ("ONLINE", "STOPPING"),
         ("FENCED", "STOPPING"), ("ONLINE", "OFFLINE"), ("FENCED", "OFFLINE"), ("STOPPING", "OFFLINE"),
         ("STOPPING", "FENCED")}  # README "Real Kafka": a controlled shutdown ends fenced
VALID_ID = re.compile(r"^[A-Za-z0-9_-]+$")
EVENT_TYPES = ("metadata_response", "broker_state", "broker_heartbeat", "partition_layout", "collector_round",
               "collector_targets", "quorum_reading")
