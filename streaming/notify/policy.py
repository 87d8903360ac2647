"""The notifier's decisions, as plain functions over plain data (deploy/README.md, "Delivery policies").

- `firing_verdict` / `resolution_verdict`: send a notification, hold it while a silence is in
  force, or silence it for good (Alertmanager's semantics: a silence suppresses, it does not
  forget; what still fires when it ends is paged then);
- `dead_letter_reason`: when a failing notification stops being retried;
- `parse_retry_after`: a receiver's `Retry-After`, bounded, whatever it says.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime

from streaming.config import DeliverySettings
from streaming.records.alert import Alert
from streaming.store import DELIVERED, HELD, PENDING, SILENCED, Silence

__all__ = [
    "HOLD",
    "SEND",
    "SILENCE",
    "WAIT",
    "Verdict",
    "covering_silence",
    "dead_letter_reason",
    "firing_verdict",
    "format_span",
    "parse_retry_after",
    "resolution_verdict",
]

SEND, HOLD, SILENCE, WAIT = "send", "hold", "silence", "wait"


@dataclass(frozen=True)
class Verdict:
    """SEND it; HOLD it until `until_ms` (the end of `silence_id`), then decide again; SILENCE it
    for good (because of `silence_id`); or WAIT: not decidable yet, look again next pass."""

    action: str
    silence_id: str | None = None
    until_ms: int | None = None


def _matching(alert: Alert, silences: Iterable[Silence]) -> list[Silence]:
    wire = alert.to_dict()  # a silence matches the alert object's fields
    return [s for s in silences if s.matches(wire)]


def covering_silence(alert: Alert, since_ms: int, silences: Iterable[Silence]) -> Silence | None:
    """The last of the unbroken chain of matching silences in force from `since_ms` on (None: no
    matching silence was in force then). Its end is when the alert stopped being silenced."""
    matching = _matching(alert, silences)
    last, t = None, since_ms
    while covering := [s for s in matching if s.active_at(t)]:
        last = max(covering, key=lambda s: (s.ends_at, s.id))
        t = last.ends_at  # active_at(t) means ends_at > t: the chain moves on, and ends
    return last


def firing_verdict(alert: Alert, recorded_at: int, now: int, silences: Iterable[Silence],
                   resolved_at: int | None) -> Verdict:
    """A firing notification recorded at `recorded_at`, due at `now`; `resolved_at` is when its
    resolution was recorded (None: it is still firing).

    A matching silence in force now holds it until that silence ends (the one ending last), then
    it is decided again. If it was recorded under silences that have all ended since, it is
    silenced for good when its resolution was recorded before they ended (it fired and resolved
    within the silence), and sent otherwise (it was still firing when the silence ended).
    """
    matching = _matching(alert, silences)
    active = [s for s in matching if s.active_at(now)]
    if active:
        holder = max(active, key=lambda s: (s.ends_at, s.id))
        return Verdict(HOLD, holder.id, holder.ends_at)
    covering = covering_silence(alert, recorded_at, matching)
    if covering is not None and resolved_at is not None and resolved_at <= covering.ends_at:
        return Verdict(SILENCE, covering.id)
    return Verdict(SEND)


def resolution_verdict(alert: Alert, recorded_at: int, now: int, silences: Iterable[Silence],
                       firing_state: str | None, firing_silence_id: str | None, firing_until_ms: int | None) -> Verdict:
    """A resolution, from what became of its firing at the same receiver.

    Delivered: the resolution is always sent (a page that was opened is closed, silence or not).
    Held by a silence: the alert resolved within the silence if the resolution was recorded
    before the silence ends, so it is silenced for good (and the firing with it); otherwise the
    firing is released first (WAIT). Silenced: silenced too. Pending: WAIT (its firing goes first).
    Anything else (the firing is a dead letter, or was never routed here): sent, unless a matching
    silence is in force now.
    """
    if firing_state == DELIVERED:
        return Verdict(SEND)
    if firing_state == HELD:
        if firing_until_ms is not None and recorded_at <= firing_until_ms:
            return Verdict(SILENCE, firing_silence_id)
        return Verdict(WAIT)
    if firing_state == SILENCED:
        return Verdict(SILENCE, firing_silence_id)
    if firing_state == PENDING:
        return Verdict(WAIT)
    active = [s for s in _matching(alert, silences) if s.active_at(now)]
    if active:
        return Verdict(SILENCE, max(active, key=lambda s: (s.ends_at, s.id)).id)
    return Verdict(SEND)


def format_span(ms: int) -> str:
    """`90 s`, `10 min`, `1 h 30 min`, `6 h`, `2 d` (the two largest units)."""
    units = (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000))
    parts = []
    rest = max(0, int(ms))
    for name, size in units:
        if rest >= size:
            parts.append(f"{rest // size} {name}")
            rest %= size
    return " ".join(parts[:2]) or f"{int(ms)} ms"


def dead_letter_reason(attempts: int, planned_at: int, now: int, limits: DeliverySettings, error: str) -> str | None:
    """Why a notification that just failed (for the `attempts`-th time) is given up, or None to retry."""
    if attempts >= limits.dead_letter_attempts:
        return f"gave up after {attempts} attempts (alerting.delivery.dead_letter_attempts): {error}"
    if now - planned_at >= limits.dead_letter_age_ms:
        return (f"gave up after {format_span(limits.dead_letter_age_ms)} of failures, {attempts} attempts "
                f"(alerting.delivery.dead_letter_age_ms): {error}")
    return None


# delay-seconds (RFC 9110), also with a fraction, an exponent or inf: ASCII only (no `1_000`, no other digits).
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|[+-]?inf(?:inity)?|nan", re.ASCII | re.IGNORECASE)


def parse_retry_after(value: str, now_ms: int, cap_ms: int) -> int | None:
    """A `Retry-After` value in milliseconds from `now_ms`, within [0, cap_ms]; None when it says
    nothing usable (garbage, negative, not a number). Never raises."""
    text = value.strip() if isinstance(value, str) else ""
    if not text or not text.isascii() or not text.isprintable():
        return None
    if _NUMBER.fullmatch(text):
        seconds = float(text)
        if math.isnan(seconds) or seconds < 0:
            return None
        return int(min(seconds * 1000, cap_ms))
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000": UTC, by RFC 5322
        when = when.replace(tzinfo=UTC)
    try:
        delay = when.timestamp() * 1000 - now_ms
    except (OverflowError, OSError, ValueError):
        return None
    return int(min(max(delay, 0), cap_ms))
