"""Silences: planned work (a rolling restart) that should not page anyone.

A silence has matchers (cluster, rule, broker, target, endpoint; every one given must match)
and a wall-clock window. It suppresses, it does not forget (Alertmanager's semantics, in
`streaming/notify/policy.py`): a firing notification it matches is *held* while it is in force
and decided again when it ends (expires, or is expired by hand): paged then if the alert still
fires, silenced for good if it resolved meanwhile (then neither its firing nor its resolution is
sent). The resolution of a firing that was delivered is always delivered, so no page is left open.
"""

from __future__ import annotations

import getpass
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from sqlalchemy import insert, or_, select, update

from streaming.config import ConfigError
from streaming.plumbing.clock import now_ms
from streaming.plumbing.redact import redact_text
from streaming.store.database import Store
from streaming.store.delivery_states import HELD
from streaming.store.notifier_tables import deliveries, silences

__all__ = ["Silence", "active_silences", "add_silence", "expire_silence", "list_silences", "parse_duration"]

_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")


def parse_duration(text: str) -> int:
    """`2h`, `90m`, `1h30m`, `45s`, `1d` → milliseconds."""
    compact = text.strip().replace(" ", "")
    pos, total = 0, 0.0
    for m in _DURATION.finditer(compact):
        if m.start() != pos:
            break
        total += float(m[1]) * _UNITS[m[2]]
        pos = m.end()
    if not compact or pos != len(compact) or total <= 0:
        raise ConfigError(f"not a duration: {text!r} (e.g. 30m, 2h, 1h30m, 1d)")
    return int(total)


@dataclass(frozen=True)
class Silence:
    id: str
    cluster: str | None
    rule: str | None
    broker_id: int | None
    target: str | None
    endpoint: str | None
    starts_at: int
    ends_at: int
    reason: str
    created_by: str | None
    created_at: int
    expired_at: int | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Silence:
        return cls(**{k: row[k] for k in cls.__dataclass_fields__})

    def active_at(self, ms: int) -> bool:
        return self.starts_at <= ms < self.ends_at

    def matches(self, alert: Mapping[str, Any]) -> bool:
        if self.cluster is not None and self.cluster not in (alert.get("cluster_id"), alert.get("target")):
            return False
        if self.rule is not None and not fnmatchcase(str(alert.get("rule")), self.rule):
            return False
        if self.broker_id is not None and alert.get("broker_id") != self.broker_id:
            return False
        if self.target is not None and alert.get("target") != self.target:
            return False
        return self.endpoint is None or alert.get("endpoint") == self.endpoint

    def matchers(self) -> str:
        parts = [f"{name}={value}" for name, value in (("cluster", self.cluster), ("rule", self.rule),
                                                       ("broker", self.broker_id), ("target", self.target),
                                                       ("endpoint", self.endpoint)) if value is not None]
        return " ".join(parts)

    def state(self, now_ms: int) -> str:
        if self.expired_at is not None:
            return "expired"
        if now_ms < self.starts_at:
            return "pending"
        return "active" if now_ms < self.ends_at else "ended"


def add_silence(store: Store, *, cluster: str | None = None, rule: str | None = None, broker_id: int | None = None,
                target: str | None = None, endpoint: str | None = None, duration_ms: int, reason: str,
                created_by: str | None = None, starts_at: int | None = None) -> Silence:
    if all(v is None for v in (cluster, rule, broker_id, target, endpoint)):
        raise ConfigError("a silence needs at least one of --cluster, --rule, --broker, --target, --endpoint")
    if broker_id is not None and cluster is None:
        raise ConfigError("--broker needs --cluster (broker ids repeat across clusters)")
    if not reason or not reason.strip():
        raise ConfigError("a silence needs a --reason")
    now = now_ms()
    start = now if starts_at is None else starts_at
    if created_by is None:
        try:
            created_by = getpass.getuser()
        except (KeyError, OSError):
            created_by = None
    silence = Silence(id=secrets.token_hex(6), cluster=cluster, rule=rule, broker_id=broker_id, target=target,
                      endpoint=endpoint, starts_at=start, ends_at=start + duration_ms,
                      reason=redact_text(reason.strip()), created_by=created_by, created_at=now, expired_at=None)
    with store.engine.begin() as conn:
        conn.execute(insert(silences).values(**silence.__dict__))
    return silence


def list_silences(store: Store, *, include_ended: bool = False) -> list[Silence]:
    stmt = select(silences).order_by(silences.c.created_at, silences.c.id)
    if not include_ended:
        stmt = stmt.where(silences.c.expired_at.is_(None), silences.c.ends_at > now_ms())
    with store.engine.connect() as conn:
        return [Silence.from_row(row._mapping) for row in conn.execute(stmt)]


def active_silences(store: Store, since_ms: int) -> list[Silence]:
    """Silences whose window reaches past `since_ms` (candidates for alerts recorded since then)."""
    with store.engine.connect() as conn:
        rows = conn.execute(select(silences).where(silences.c.ends_at > since_ms))
        return [Silence.from_row(row._mapping) for row in rows]


def expire_silence(store: Store, silence_id: str) -> Silence:
    """End a silence now; a unique prefix of its id is enough."""
    prefix = silence_id.strip()
    if not prefix:
        raise ConfigError("give the id of the silence to expire (see `fleetwatch silence list`)")
    now = now_ms()
    with store.engine.begin() as conn:
        found = [Silence.from_row(r._mapping) for r in conn.execute(
            select(silences).where(or_(silences.c.id == prefix, silences.c.id.startswith(prefix, autoescape=True))))]
        exact = [s for s in found if s.id == prefix]
        if exact:
            found = exact
        if not found:
            raise ConfigError(f"no silence with id {prefix!r}")
        if len(found) > 1:
            raise ConfigError(f"{prefix!r} names {len(found)} silences; give more of the id")
        silence = found[0]
        if silence.expired_at is not None or silence.ends_at <= now:
            return silence
        conn.execute(update(silences).where(silences.c.id == silence.id)
                     .values(expired_at=now, ends_at=max(now, silence.starts_at)))
        # What it held is decided again now, not at its planned end.
        conn.execute(update(deliveries).where(deliveries.c.silence_id == silence.id, deliveries.c.state == HELD,
                                              deliveries.c.next_attempt_at > now)
                     .values(next_attempt_at=now))
    return Silence(**{**silence.__dict__, "expired_at": now, "ends_at": max(now, silence.starts_at)})
