"""The alert (SPEC section 4): one typed record, its rules, its identity and its wire format.

Detection makes alerts (`Alert.firing`, `Alert.resolved_at`); every other part reads them as this
record: the job's output rows carry one beside its sort key (`encode_output` / `decode_output`),
the store records them, the alerts topic, the replay file and the notifier's outbox carry the
SPEC section 4 object (`Alert.to_dict`, `Alert.message`, `Alert.stored_body`), and a stored or
received object becomes a record again with `Alert.from_dict`.

Names (issue 43): beside the SPEC's fields an alert carries `cluster_name`, the cluster's `tags`, and for
a broker alert `broker_host` and `rack` (streaming/detect/README.md, "Alert fields"). They are additive:
an object without them (stored or sent before) decodes with none, and `alert_id` does not depend on them.

Two spellings of the subject: detection's (`Alert.subject`, part of `alert_id`: `cluster/broker`,
a cluster id, a target name or an endpoint), and the store's (`Alert.queue_subject`:
`broker:cluster:broker`, `cluster:id`, `target:name`, `endpoint:host:port`), which the outbox and
the notifier's deliveries are queued by and which stored data, the dashboard and silences use.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any, NamedTuple

__all__ = [
    "ALERT_SCHEMA",
    "EVENT_PHASE",
    "RULES",
    "SEVERITIES",
    "TIMER_PHASE",
    "Alert",
    "RuleKind",
    "SortKey",
    "alert_id",
    "decode_output",
    "encode_output",
    "queue_subject_of",
]

ALERT_SCHEMA = "fleetwatch.alert/v1"

# Most severe first: the order the dashboard lists them in.
SEVERITIES = ("critical", "warning", "info")


class RuleKind(NamedTuple):
    severity: str
    subject_kind: str  # broker, cluster, target or endpoint (SPEC section 4, "Subjects"), or collector


RULES: dict[str, RuleKind] = {
    "broker.heartbeat_lost": RuleKind("critical", "broker"),
    "broker.heartbeat_late": RuleKind("warning", "broker"),
    # Issue 44: a quorum reading shows the broker's last fetch from the controller stall_after_ms old.
    "broker.stalled": RuleKind("warning", "broker"),
    "broker.fenced": RuleKind("warning", "broker"),
    "broker.partitioned": RuleKind("critical", "broker"),
    "broker.stuck_stopping": RuleKind("warning", "broker"),
    "broker.epoch_regression": RuleKind("critical", "broker"),
    "broker.flapping": RuleKind("warning", "broker"),
    "broker.illegal_transition": RuleKind("info", "broker"),
    "cluster.no_controller": RuleKind("critical", "cluster"),
    "cluster.controller_flapping": RuleKind("warning", "cluster"),
    "cluster.controller_disagreement": RuleKind("warning", "cluster"),
    "cluster.partitions_offline": RuleKind("critical", "cluster"),  # issue 30: from partition layouts
    "cluster.under_min_isr": RuleKind("warning", "cluster"),
    "cluster.id_changed": RuleKind("critical", "target"),
    "cluster.id_duplicate": RuleKind("critical", "cluster"),
    "cluster.id_invalid": RuleKind("warning", "target"),
    "cluster.unreachable": RuleKind("critical", "target"),
    "connection.misrouted": RuleKind("critical", "endpoint"),
    "endpoint.collision": RuleKind("critical", "endpoint"),
    # Issue 41: a collector's rounds stopped; its subject is the collector (`source`).
    "collector.silent": RuleKind("warning", "collector"),
}

# Alerts fired while applying an event sort before alerts fired by a timer at the same time.
EVENT_PHASE, TIMER_PHASE = 0, 1

# (event time, phase, position of the causing event, rule, subject, resolved): the order of
# detection's output, merged across shards and micro-batches. Not part of the alert object.
SortKey = tuple[Any, ...]


def alert_id(rule: str, subject: str, starts_at: int) -> str:
    """Stable for one incident, so receivers can deduplicate (SPEC section 4)."""
    return hashlib.sha256(f"{rule}|{subject}|{starts_at}".encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class Alert:
    """One alert line: firing, or resolved with `ends_at` (SPEC section 4)."""

    alert_id: str
    rule: str
    status: str
    severity: str
    subject: str  # detection's spelling (see the module's docstring); not on the wire
    cluster_id: str | None
    target: str | None
    broker_id: int | None
    endpoint: str | None
    starts_at: int
    ends_at: int | None
    summary: str
    details: dict[str, Any]
    # Detection's tie-break: (phase, position of the event that caused it). Not on the wire.
    cause: tuple[int, tuple[Any, ...]] = (TIMER_PHASE, ())
    # The collector a collector alert is about (issue 41); on the wire only then.
    source: str | None = None
    # Names (issue 43), set when the alert fires; the resolved line repeats them. Additive fields of the
    # contract: none of them is part of `alert_id`.
    cluster_name: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    broker_host: str | None = None  # host:port, of a broker alert
    rack: str | None = None  # of a broker alert

    def __setstate__(self, state: list[Any]) -> None:
        # A detection state pickled before a field was added holds fewer values: the new ones take their
        # defaults (a slotted dataclass has no class default to fall back on).
        for f, value in zip(fields(self), state, strict=False):
            object.__setattr__(self, f.name, value)
        for f in fields(self)[len(state):]:
            object.__setattr__(self, f.name, f.default_factory() if f.default is MISSING else f.default)

    @classmethod
    def firing(cls, rule: str, subject: str, at: int, summary: str, *, cluster_id: str | None = None,
               target: str | None = None, broker_id: int | None = None, endpoint: str | None = None,
               source: str | None = None, details: dict[str, Any] | None = None, cluster_name: str | None = None,
               tags: dict[str, str] | None = None, broker_host: str | None = None,
               rack: str | None = None) -> Alert:
        """A new incident of `rule` about `subject` (detection's spelling), starting `at`."""
        return cls(alert_id=alert_id(rule, subject, at), rule=rule, status="firing", severity=RULES[rule].severity,
                   subject=subject, cluster_id=cluster_id, target=target, broker_id=broker_id, endpoint=endpoint,
                   starts_at=at, ends_at=None, summary=summary, details=details or {}, source=source,
                   cluster_name=cluster_name, tags=tags or {}, broker_host=broker_host, rack=rack)

    def resolved_at(self, at: int, **details: Any) -> Alert:
        """This incident's resolution at `at` (never before it started); `details` are added."""
        return replace(self, status="resolved", ends_at=max(at, self.starts_at),
                       details={**self.details, **details} if details else self.details)

    @property
    def event_ms(self) -> int:
        return self.ends_at if self.status == "resolved" and self.ends_at is not None else self.starts_at

    @property
    def queue_subject(self) -> str:
        """The store's spelling of the subject (outbox and deliveries rows, the dashboard)."""
        return _queue_subject(self.rule, self.cluster_id, self.broker_id, self.target, self.endpoint, self.source)

    def sort_key(self) -> SortKey:
        phase, position = self.cause
        return (self.event_ms, phase, position, self.rule, self.subject, self.status == "resolved")

    def to_dict(self) -> dict[str, Any]:
        """The SPEC section 4 object, in the SPEC's field order (and `source` after `endpoint` for a
        collector alert), then the names (issue 43)."""
        wire = {
            "schema": ALERT_SCHEMA,
            "alert_id": self.alert_id,
            "rule": self.rule,
            "status": self.status,
            "severity": self.severity,
            "cluster_id": self.cluster_id,
            "target": self.target,
            "broker_id": self.broker_id,
            "endpoint": self.endpoint,
        }
        if self.source is not None:
            wire["source"] = self.source
        wire.update(starts_at=self.starts_at, ends_at=self.ends_at, summary=self.summary, details=self.details,
                    cluster_name=self.cluster_name, tags=self.tags, broker_host=self.broker_host, rack=self.rack)
        return wire

    def message(self) -> str:
        """The object as the alerts topic carries it: compact, in the SPEC's field order."""
        return json.dumps(self.to_dict(), separators=(",", ":"))

    def stored_body(self) -> str:
        """The object as the store keeps it (alert_history, outbox): compact, keys sorted."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> Alert:
        """A SPEC section 4 object (the wire, a stored body or row) as a record. Raises KeyError for
        a missing field or an unknown rule, TypeError when `obj` is no object. The names (issue 43) are
        optional: an object written before them has none."""
        kind = RULES[obj["rule"]].subject_kind
        subject = (f"{obj['cluster_id']}/{obj['broker_id']}" if kind == "broker"
                   else obj["cluster_id"] if kind == "cluster" else obj["source"] if kind == "collector"
                   else obj[kind])
        return cls(alert_id=obj["alert_id"], rule=obj["rule"], status=obj["status"], severity=obj["severity"],
                   subject=subject, cluster_id=obj["cluster_id"], target=obj["target"], broker_id=obj["broker_id"],
                   endpoint=obj["endpoint"], starts_at=obj["starts_at"], ends_at=obj["ends_at"],
                   summary=obj["summary"], details=obj["details"], source=obj.get("source"),
                   cluster_name=obj.get("cluster_name"), tags=obj.get("tags") or {},
                   broker_host=obj.get("broker_host"), rack=obj.get("rack"))

    @classmethod
    def from_json(cls, text: str | bytes) -> Alert:
        """`from_dict` of a JSON text; raises ValueError for text that is not JSON."""
        return cls.from_dict(json.loads(text))


def _queue_subject(rule: str, cluster_id: str | None, broker_id: int | None, target: str | None,
                   endpoint: str | None, source: str | None) -> str:
    kind = RULES[rule].subject_kind
    if kind == "broker":
        return f"broker:{cluster_id}:{broker_id}"
    if kind == "collector":
        return f"collector:{source}"
    if kind == "target":
        return f"target:{target}"
    if kind == "endpoint":
        return f"endpoint:{endpoint}"
    return f"cluster:{cluster_id}"


def queue_subject_of(alert: Mapping[str, Any]) -> str:
    """`Alert.queue_subject` of any object with the rule and the subject's fields (an alert object,
    a ground-truth label)."""
    return _queue_subject(alert["rule"], alert.get("cluster_id"), alert.get("broker_id"), alert.get("target"),
                          alert.get("endpoint"), alert.get("source"))


def encode_output(alert: Alert) -> str:
    """The payload of the job's output row of kind "alert": the sort key beside the object."""
    return json.dumps([alert.sort_key(), alert.to_dict()], separators=(",", ":"))


def decode_output(payload: str) -> tuple[SortKey, Alert]:
    """An "alert" output row's payload -> (sort key, alert). The key comes back as JSON made it
    (lists for tuples), which sorts the same."""
    key, obj = json.loads(payload)
    return tuple(key), Alert.from_dict(obj)
