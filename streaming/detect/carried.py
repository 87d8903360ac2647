"""Alerts carried over a reset of the detection state: when the state that replaces them says they end.

After a checkpoint reset the new state reads the bus from its earliest offsets. An alert that was
open before the reset and started before the oldest telemetry the new state read had its evidence
on the bus no longer (retention deleted it, or the bus was replaced): the new state cannot fire it
again, and its silence says nothing. Such an alert is *carried over* (README.md, "Checkpoint
reset"): it stays firing until the new state says something about its subject:
- it fires the same rule about the same subject (another `starts_at`): the carried alert is
  superseded by the new one, and resolved at the new one's start;
- it shows the subject healthy with telemetry newer than the alert's start: a broker heartbeating
  and not fenced, a target answering, a cluster with an active controller. The new state would have
  fired the rule again had its condition still held.
An endpoint alert ends only by being superseded: no snapshot shows an endpoint healthy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from streaming.records.alert import RULES, Alert

__all__ = ["SUPERSEDED_REASON", "carried_over_ends", "is_carried_over"]

SUPERSEDED_REASON = "carried over a detection state reset; the new state fires it again as alert {alert_id}"
HEALTHY_REASON = "carried over a detection state reset; the new state shows its subject healthy since then"


def is_carried_over(starts_at: int, evidence_since: int | None) -> bool:
    """An alert open at a reset is carried over when it started before the oldest telemetry the new
    state read (`evidence_since`, event time): the bus no longer holds what fired it."""
    return evidence_since is not None and starts_at < evidence_since


def carried_over_ends(carried: Sequence[Alert], fired: Iterable[Alert],
                      snapshots: Mapping[str, Iterable[Mapping[str, Any]]]) -> list[Alert]:
    """The resolutions of the carried-over alerts that a micro-batch of the new state ends.

    `fired`: the batch's alert lines; `snapshots`: its state rows by kind ("broker", "cluster",
    "target", as detection emits them)."""
    newer_firing: dict[tuple[str, str], Alert] = {}
    for alert in fired:
        if alert.status == "firing":
            key = (alert.rule, alert.subject)
            if key not in newer_firing or alert.starts_at < newer_firing[key].starts_at:
                newer_firing[key] = alert
    healthy_since = _healthy_since(snapshots)
    ended = []
    for alert in carried:
        successor = newer_firing.get((alert.rule, alert.subject))
        if successor is not None and successor.alert_id != alert.alert_id:
            ended.append(alert.resolved_at(successor.starts_at,
                                           reason=SUPERSEDED_REASON.format(alert_id=successor.alert_id)))
            continue
        seen = healthy_since.get(_subject_key(alert))
        if seen is not None and seen > alert.starts_at:
            ended.append(alert.resolved_at(seen, reason=HEALTHY_REASON))
    return ended


def _subject_key(alert: Alert) -> tuple[Any, ...]:
    kind = RULES[alert.rule].subject_kind
    if kind == "broker":
        return ("broker", alert.cluster_id, alert.broker_id)
    if kind == "target":
        return ("target", alert.target)
    if kind == "cluster":
        return ("cluster", alert.cluster_id)
    return ("endpoint", alert.endpoint)


def _healthy_since(snapshots: Mapping[str, Iterable[Mapping[str, Any]]]) -> dict[tuple[Any, ...], int]:
    """The latest moment each subject of the snapshots was shown healthy."""
    seen: dict[tuple[Any, ...], int] = {}

    def note(key: tuple[Any, ...], at: Any) -> None:
        if isinstance(at, int) and at > seen.get(key, -1):
            seen[key] = at

    for broker in snapshots.get("broker", ()):
        if broker.get("fenced") is not True:  # unknown counts: heartbeats do
            note(("broker", broker.get("cluster_id"), broker.get("broker_id")), broker.get("last_heartbeat_ms"))
    for target in snapshots.get("target", ()):
        ok, error = target.get("last_ok_ms"), target.get("last_error_ms")
        if ok is not None and (error is None or error < ok):
            note(("target", target.get("target")), ok)
    for cluster in snapshots.get("cluster", ()):
        controller = cluster.get("controller_id")
        if controller is not None and controller >= 0:
            note(("cluster", cluster.get("cluster_id")), cluster.get("last_response_ms"))
    return seen
