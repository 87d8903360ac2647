"""A micro-batch's quarantine rows, bounded (issue 42): the messages the parse stage rejected and the
events that came late, as `quarantine` rows, at most `per_reason` of each reason group
(streaming/store/quarantine_bounds.py); the rest of a group is counted on the last row stored
(`not_stored`), and each row's `raw` holds at most 4 KiB of its message (`raw_bytes`: its size).

Which rows of a group are stored does not depend on the order Spark hands them over: the first by
(topic and partition, offset), so a micro-batch that Spark runs again stores the same rows, with
the same counts (the store writes each origin once).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from streaming.records.job_output import LateEvent, Refused
from streaming.store import fit_raw, reason_group

__all__ = ["bounded_quarantine", "quarantine_rows"]


def quarantine_rows(refused: Iterable[Refused], late: Iterable[LateEvent], now: int) -> list[dict[str, Any]]:
    """The `quarantine` rows of a micro-batch's refused messages and late events, whole."""
    rows = [{"origin": r.origin, "reason": r.reason, "detail": r.detail, "raw": r.raw, "source": r.source,
             "recorded_at": now} for r in refused]
    rows += [{"origin": e.origin, "reason": "late_event", "detail": None, "raw": e.text, "source": None,
              "recorded_at": now} for e in late]
    return rows


def bounded_quarantine(rows: list[dict[str, Any]], per_reason: int) -> tuple[list[dict[str, Any]], Counter[str]]:
    """The rows to store (at most `per_reason` per reason group, `raw` fitted, `raw_bytes` and
    `not_stored` set) and, per reason group, how many were counted and not stored."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[reason_group(row["reason"])].append(row)
    stored: list[dict[str, Any]] = []
    not_stored: Counter[str] = Counter()
    for group, members in groups.items():
        members.sort(key=_origin_order)
        kept = [{**row, "not_stored": None} for row in members[:per_reason]]
        if len(members) > per_reason:
            not_stored[group] = len(members) - per_reason
            kept[-1]["not_stored"] = not_stored[group]
        for row in kept:
            row["raw"], row["raw_bytes"] = fit_raw(row["raw"])
        stored += kept
    return stored, not_stored


def _origin_order(row: dict[str, Any]) -> tuple[str, int, str]:
    """An origin (`topic:partition:offset`) in bus order: by topic and partition, then offset as a number."""
    origin: str = row["origin"]
    where, _, offset = origin.rpartition(":")
    return (where, int(offset), origin) if offset.isdigit() else (origin, -1, origin)
