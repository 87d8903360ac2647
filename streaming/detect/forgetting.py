"""The detection state's time to live: forgetting what has gone quiet (`state_ttl_ms`).

A fleet changes: clusters are decommissioned, targets leave the probes' configuration. What the
engines keep about a subject they are no longer told about is forgotten once it has been quiet
for longer than `state_ttl_ms` (event time, default one day), unless an alert about it is still
open: an open alert is never dropped without its resolution, so its subject is kept.

The TTL is longer than every rule window (the configuration refuses anything else), so
forgetting never cuts a rule short. It is checked at the events themselves, in event-time order,
so a replay forgets exactly what the live job forgot, whatever its micro-batches.

Within a cluster's shard, which hears from its cluster all the time, each broker is forgotten on
its own by the same rule (`BrokerTracker.forgettable`), so the shard holds the brokers of the last
TTL, not every node id it ever heard of.

A cluster's advertisements and a target's held cluster id are kept by other shards than the
ones that hear them (the address's, the id's: README.md, "Shards and scale-out"), which hear of
them only when they change. A lease tells those shards how long a holding stands without news:
a `Lease` for a target's held id, a renewal time per pair for a cluster's advertisements
(`misroutes.Advert`), both renewed every TTL / RENEWALS_PER_TTL at most.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RENEWALS_PER_TTL", "Lease"]

# A lease is renewed at the first advertisement more than TTL / RENEWALS_PER_TTL after the last
# renewal: a holding is forgotten between 15/16 of the TTL and the TTL after it was last heard of,
# for one hand-off per holding and sixteenth of the TTL instead of one per advertisement.
RENEWALS_PER_TTL = 16


@dataclass
class Lease:
    """When a holding (a cluster's advertisements, a target's held id) was last renewed at the
    shards that keep it. It stands until `renewed_ms + ttl` inclusive; after that it has lapsed."""

    renewed_ms: int | None = None

    def lapsed(self, now: int, ttl_ms: int) -> bool:
        return self.renewed_ms is not None and now - self.renewed_ms > ttl_ms

    def renew_due(self, now: int, ttl_ms: int) -> bool:
        return self.renewed_ms is None or now - self.renewed_ms > ttl_ms // RENEWALS_PER_TTL

    def until(self, ttl_ms: int) -> int:
        assert self.renewed_ms is not None
        return self.renewed_ms + ttl_ms
