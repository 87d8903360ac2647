"""Names in every alert (issue 43): which cluster, by the name people use, and where a broker runs.

An alert is about a cluster id, a broker id, a target or an endpoint: forms no one reads at 3 a.m.
When it fires, detection adds what its shard knows of the subject by name (README.md, "Alert fields"):
- `cluster_name`: of a target or endpoint alert, its target (the configured cluster the probe was
  asked to watch); of any other, the configured cluster found by the alert's cluster id
  (`expected_cluster_id`), else by the alert's target, else by the last target whose successful
  response reported the cluster (the shard's, as of the alert's moment); that target's name when no
  configured cluster has it. None when none is known (a cluster heard of by its heartbeats only).
- `tags`: the tags of that configured cluster (`clusters[].tags`), else none.
- of a broker alert, `broker_host` (the address a broker list last named it at, else the first of
  its heartbeats' endpoints) and `rack`, as last seen.
The summary names them: `payments-eu1: broker 3 (b3.pay:9092, rack a) has sent no heartbeat for 9 s`.
None of them is part of the alert id, and the resolved line repeats the firing line's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from streaming.config import RuleBook
from streaming.records.alert import RULES

__all__ = ["NO_CONFIG", "NO_NAMES", "AlertNames", "alert_names", "book_names", "duration_text", "named_summary"]

# The subjects whose alerts are named by their own target (a target's, an endpoint probed for one).
_BY_TARGET = ("target", "endpoint")


@dataclass(frozen=True, slots=True)
class AlertNames:
    cluster_name: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    broker_host: str | None = None
    rack: str | None = None


NO_NAMES = AlertNames()
NO_CONFIG = RuleBook()  # no configured cluster: names from the targets alone


def alert_names(book: RuleBook, rule: str, cluster_id: str | None, target: str | None,
                last_target: str | None = None, broker_host: str | None = None,
                rack: str | None = None) -> AlertNames:
    """The names of an alert of `rule` about `cluster_id` (and `target`, the alert's own), whose shard
    last heard the cluster from `last_target`; a broker's `broker_host` and `rack` as last seen."""
    if RULES[rule].subject_kind in _BY_TARGET and target:
        found, name = book.configured(None, target), target
    else:
        seen = target or last_target
        found = book.configured(cluster_id, seen)
        name = found.name if found is not None else seen
    return AlertNames(name, dict(found.tags) if found is not None else {}, broker_host, rack)


def book_names(book: RuleBook) -> Callable[[str, str | None, str | None, int | None], AlertNames]:
    """The names of a shard that knows no target or broker of its own (a second-pass shard's): from the
    alert's own fields and the book alone."""
    return lambda rule, cluster_id, target, broker_id: alert_names(book, rule, cluster_id, target)


def named_summary(summary: str, names: AlertNames, broker_id: int | None) -> str:
    """`summary` with the names: the cluster's first, and a broker's address and rack after `broker <id>`
    (every broker rule's summary starts so)."""
    where = ", ".join(part for part in (names.broker_host, names.rack and f"rack {names.rack}") if part)
    lead = f"broker {broker_id}"
    if broker_id is not None and where and summary.startswith(lead + " "):
        summary = f"{lead} ({where}){summary[len(lead):]}"
    return f"{names.cluster_name}: {summary}" if names.cluster_name else summary


def duration_text(ms: int) -> str:
    """A rule's duration as a person reads it: 9 s, 4.5 s, 2 min, 1.5 h."""
    if ms >= 3_600_000 and ms % 360_000 == 0:
        return f"{ms / 3_600_000:g} h"
    if ms >= 60_000 and ms % 6_000 == 0:
        return f"{ms / 60_000:g} min"
    return f"{ms / 1000:g} s"
