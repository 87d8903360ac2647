"""The detection state's time to live: forgetting what has gone quiet (`state_ttl_ms`).

A fleet changes: clusters are decommissioned, targets leave the probes' configuration. What the
engines keep about a subject they are no longer told about is forgotten once it has been quiet
for longer than `state_ttl_ms` (event time, default one day), unless an alert about it is still
open: an open alert is never dropped without its resolution, so its subject is kept.

The TTL is longer than every rule window (the configuration refuses anything else), so
forgetting never cuts a rule short. It is checked at the events themselves, in event-time order,
so a replay forgets exactly what the live job forgot, whatever its micro-batches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = ["LastHeard"]

K = TypeVar("K")


@dataclass
class LastHeard(Generic[K]):
    """When each key was last heard of, to find cheaply the keys quiet for longer than a TTL."""

    at: dict[K, int] = field(default_factory=dict)
    # No key is older than this (a bound kept by `quiet()`), so none can have been quiet for
    # longer than the TTL before this moment + the TTL: the keys are looked through about once per TTL.
    look_after: int | None = None

    def heard(self, key: K, ts: int) -> None:
        if ts > self.at.get(key, ts - 1):
            self.at[key] = ts
        if self.look_after is None:
            self.look_after = ts

    def quiet(self, now: int, ttl_ms: int) -> list[K]:
        """The keys not heard of for longer than `ttl_ms` before `now` (cheap when none can be).

        The caller forgets or keeps each of them."""
        if self.look_after is None or now - self.look_after <= ttl_ms:
            return []
        quiet = [key for key, ts in self.at.items() if now - ts > ttl_ms]
        # A kept key is heard at `now`: none is earlier than the earliest of the others.
        self.look_after = min((ts for ts in self.at.values() if now - ts <= ttl_ms), default=now)
        return quiet

    def forget(self, key: K) -> None:
        del self.at[key]

    def keep(self, key: K, now: int) -> None:
        """A quiet key that must stay (an alert about it is open): look at it again a TTL later."""
        self.at[key] = now
