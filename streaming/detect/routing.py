"""Which shards an event feeds, and which shard a hand-off goes to (engine.py, holder_shard.py).

No shard is fleet-wide (README.md, "Shards and scale-out"). One event goes to every shard of the
first pass (`EVERY_SHARD`): a collector's list of the targets it watches (`collector_targets`), which
the shards of a target it dropped must hear of although nothing else of theirs comes any more.
"""

from __future__ import annotations

from streaming.detect.engine import CLUSTER_PREFIX, TARGET_PREFIX, ShardEngine
from streaming.detect.holder_shard import ADDRESS_PREFIX, ID_PREFIX, SOURCE_PREFIX, HolderShard
from streaming.detect.misroutes import AddressChange
from streaming.detect.observers import CollectorSilence
from streaming.detect.shard_output import Handoff
from streaming.records.contract import CollectorRound, CollectorTargets, Event, MetadataResponse

__all__ = ["EVERY_SHARD", "engine_for", "shard_of_handoff", "shards_of"]

# The first-pass shard name that stands for every shard of the first pass (see the docstring).
EVERY_SHARD = "*"


def shards_of(event: Event) -> list[str]:
    """The first-pass shards an event feeds: a response feeds its target's shard, and when it
    succeeded with a cluster id, also its cluster's shard. A broker event feeds its cluster's
    shard: it always names its cluster (the contract quarantines one that does not,
    `missing_cluster_id`), so brokers of different clusters are never merged into one shard."""
    if isinstance(event, MetadataResponse):
        if event.ok and event.cluster_id:
            return [TARGET_PREFIX + event.target, CLUSTER_PREFIX + event.cluster_id]
        return [TARGET_PREFIX + event.target]
    if isinstance(event, CollectorTargets):
        return [EVERY_SHARD]
    if isinstance(event, CollectorRound):  # a target that never answered has no cluster to observe
        return [CLUSTER_PREFIX + event.cluster_id] if event.cluster_id else []
    return [CLUSTER_PREFIX + event.cluster_id]  # a broker event, a layout, a quorum reading


def shard_of_handoff(change: Handoff) -> str:
    """The second-pass shard a hand-off goes to."""
    if isinstance(change, AddressChange):
        return ADDRESS_PREFIX + change.address
    if isinstance(change, CollectorSilence):
        return SOURCE_PREFIX + change.source
    return ID_PREFIX + change.cluster_id


def engine_for(shard: str) -> ShardEngine | HolderShard:
    """A new engine for a shard of either pass."""
    if shard.startswith((ADDRESS_PREFIX, ID_PREFIX, SOURCE_PREFIX)):
        return HolderShard(shard)
    return ShardEngine(shard)
