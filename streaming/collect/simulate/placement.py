"""Where a simulated cluster's partitions live, and how Kafka's controller moves their leaders and
in-sync replicas as brokers come and go: what a `partition_layout` reading shows (issue 30).

Two small topics per cluster, their partitions spread over every broker in rack order:
- `orders`: replication 3, `min.insync.replicas` 2 (acks=all producers need two copies);
- `clicks`: replication 2, `min.insync.replicas` 1 (cheaper, availability first).
With fewer brokers a topic has as many replicas as there are brokers (Kafka refuses more), and then
`min.insync.replicas` 1, so that no single broker's fault leaves a partition under its minimum.
So with three brokers or more one broker down changes no rule, and two down together put every
`orders` partition with both on its replicas under min ISR and take the `clicks` partitions whose
two replicas they are offline.

The controller's semantics, as measured on Kafka 4.4 (tests/pipeline/test_real_kafka_faults.py):
a broker that is not listed in the metadata (fenced, or gone) leaves every ISR, and the partitions
it led get the first in-sync replica of their assignment as leader. The last in-sync replica of a
partition stays in its ISR when it goes (KRaft elects no replica that was not in sync), and the
partition is offline (leader -1) until that replica is back. A live replica that is back catches up
and rejoins the ISR of every partition that has a leader. Every
`leader.imbalance.check.interval.seconds` (300 s) leadership goes back to each partition's
preferred replica (the first of its assignment) where that one is in sync.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from streaming.records.contract import TopicLayout

__all__ = ["PREFERRED_ELECTION_MS", "Placement"]

PREFERRED_ELECTION_MS = 300_000  # leader.imbalance.check.interval.seconds
_PARTITIONS = 6  # per topic, or one per broker on larger clusters
# (name, replication, min.insync.replicas) with enough brokers.
_TOPICS = (("orders", 3, 2), ("clicks", 2, 1))


@dataclass
class _Partition:
    index: int
    replicas: tuple[int, ...]
    leader: int
    isr: tuple[int, ...]


class Placement:
    """One cluster's topics, their leaders and ISRs."""

    def __init__(self, brokers: int) -> None:
        count = max(_PARTITIONS, brokers)
        self.topics: list[tuple[str, int, list[_Partition]]] = []
        for shift, (name, replication, min_isr) in enumerate(_TOPICS):
            factor = min(replication, brokers)
            # Partition p's replicas start at broker p + shift + 1 and go round in node order (the
            # racks' order): consecutive brokers, so two neighbours hold some `clicks` partition alone.
            parts = [_Partition(p, replicas := tuple((p + shift + i) % brokers + 1 for i in range(factor)),
                                replicas[0], replicas) for p in range(count)]
            self.topics.append((name, min_isr if factor == replication else 1, parts))

    def _partitions(self) -> Iterable[_Partition]:
        return (p for _, _, parts in self.topics for p in parts)

    def apply(self, live: frozenset[int]) -> None:
        """The controller's answer to a broker state change: `live` are the brokers it lists."""
        for p in self._partitions():
            in_sync = [r for r in p.isr if r in live]
            if in_sync:
                p.leader = p.leader if p.leader in in_sync else next(r for r in p.replicas if r in in_sync)
                p.isr = tuple(r for r in p.replicas if r in live)
            else:
                # No live in-sync replica: offline, the last one kept in the ISR until it is back.
                p.leader, p.isr = -1, p.isr[:1]

    def elect_preferred(self) -> None:
        """The periodic preferred-leader election: a partition with a leader goes back to its first
        replica when that one is in sync (then live: a led partition's ISR holds live brokers only)."""
        for p in self._partitions():
            if p.leader >= 0 and p.replicas[0] in p.isr:
                p.leader = p.replicas[0]

    def reading(self) -> tuple[TopicLayout, ...]:
        """The topics as a layout reading lists them (each topic's effective min.insync.replicas)."""
        return tuple(TopicLayout(name, min_isr, tuple((p.index, p.leader, p.replicas, p.isr) for p in parts))
                     for name, min_isr, parts in self.topics)
