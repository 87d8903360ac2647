"""Blast radius (issue 30): where a cluster's partitions live, what a broker incident does to them,
and the two rules the layouts say directly (`cluster.partitions_offline`, `cluster.under_min_isr`).

A cluster's shard keeps its latest `partition_layout` (README.md, "Blast radius"). A broker incident
firing at `T` carries, in `details.impact`, what taking the broker out of the layout last read
before `T` does:
- `partitions_led`: partitions the broker leads, as of the last layout that still listed it in an
  ISR (Kafka moves a fenced broker's leaderships away; a layout read between the fencing and the
  alert would otherwise say it led nothing);
- `replicas_held`: partitions with a replica on the broker;
- `partitions_offline`: of those, the ones with no leader, or no in-sync replica but the broker;
- `partitions_under_min_isr`: of those, the others with fewer in-sync replicas but the broker than
  the topic's `min.insync.replicas`.
The last two are what Kafka shows once it has fenced the broker (it removes it from every ISR),
whether the layout was read before or after that. Other brokers count as down as far as the layout
shows them out of the ISRs (Kafka fenced them before it was read), not by their open incidents:
whether another broker's deadline has fired yet depends on the micro-batches (a deadline is decided
when the data or the watermark passes it), and an alert must not.
Plain Python and pickled with the shard: nothing here reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from streaming.detect.alerts import Emitter, Incidents
from streaming.records.contract import PartitionLayout

__all__ = ["OFFLINE", "TOP_TOPICS", "UNDER_MIN_ISR", "LayoutTracker", "layout_counts"]

OFFLINE = "cluster.partitions_offline"
UNDER_MIN_ISR = "cluster.under_min_isr"
TOP_TOPICS = 5
# Kafka's default min.insync.replicas, for a layout that read neither the topic's nor the brokers'.
_KAFKA_MIN_ISR = 1


def _min_isr(own: int | None, default: int | None) -> int:
    return own if own is not None else default if default is not None else _KAFKA_MIN_ISR


def layout_counts(layout: PartitionLayout) -> tuple[int, int, list[dict[str, Any]]]:
    """(offline, under min ISR, top topics) as the layout itself says: a partition is offline with
    no leader (-1), under min ISR when led with fewer in-sync replicas than its topic's minimum."""
    offline = under = 0
    per_topic = []
    for topic in layout.topics:
        minimum = _min_isr(topic.min_insync, layout.default_min_insync)
        t_off = sum(1 for p in topic.partitions if p[1] < 0)
        t_under = sum(1 for p in topic.partitions if p[1] >= 0 and len(p[3]) < minimum)
        offline, under = offline + t_off, under + t_under
        if t_off or t_under:
            per_topic.append({"topic": topic.name, "offline": t_off, "under_min_isr": t_under})
    per_topic.sort(key=lambda t: (-t["offline"], -t["under_min_isr"], t["topic"]))
    return offline, under, per_topic[:TOP_TOPICS]


@dataclass
class LayoutTracker:
    """The cluster's latest layout and, per broker, its leaderships as of the last layout that listed
    it in an ISR; the layout rules' state."""

    cluster_id: str
    layout: PartitionLayout | None = None
    led: dict[int, tuple[int, dict[str, int]]] = field(default_factory=dict)  # broker -> (ts, topic -> led)

    def on_layout(self, event: PartitionLayout, inc: Incidents, out: Emitter) -> None:
        if self.layout is not None and event.ts < self.layout.ts:
            return  # an older reading than the one kept (two collectors): it says nothing newer
        self.layout = event
        in_sync: dict[int, dict[str, int]] = {}
        for topic in event.topics:
            for _, leader, _, isr in topic.partitions:
                for broker in isr:
                    counts = in_sync.setdefault(broker, {})
                    if broker == leader:
                        counts[topic.name] = counts.get(topic.name, 0) + 1
        for broker, counts in in_sync.items():
            self.led[broker] = (event.ts, counts)
        offline, under, top = layout_counts(event)
        for rule, count, what in ((OFFLINE, offline, "offline (no leader)"),
                                  (UNDER_MIN_ISR, under, "under min.insync.replicas")):
            if count:
                inc.fire(out, rule, self.cluster_id, event.ts,
                         f"{count} partition(s) of cluster {self.cluster_id} {what}",
                         cluster_id=self.cluster_id, target=event.target,
                         details={"partitions": count, "complete": event.complete, "top_topics": top})
            elif event.complete:
                # A partial layout proves nothing about the partitions it did not list.
                inc.resolve(out, rule, self.cluster_id, event.ts)

    def impact(self, broker_id: int) -> dict[str, Any] | None:
        """What the broker's incident does to the cluster's partitions (module docstring); None
        without a layout."""
        layout = self.layout
        if layout is None:
            return None
        led_at, led = self.led.get(broker_id, (layout.ts, {}))
        held = offline = under = 0
        per_topic: dict[str, list[int]] = {}  # topic -> [led, replicas, offline, under]
        for topic in layout.topics:
            minimum = _min_isr(topic.min_insync, layout.default_min_insync)
            counts = [led.get(topic.name, 0), 0, 0, 0]
            for _, leader, replicas, isr in topic.partitions:
                if broker_id not in replicas:
                    continue
                counts[1] += 1
                live = sum(1 for r in isr if r != broker_id)
                if leader < 0 or live == 0:
                    counts[2] += 1
                elif live < minimum:
                    counts[3] += 1
            if any(counts):
                per_topic[topic.name] = counts
            held, offline, under = held + counts[1], offline + counts[2], under + counts[3]
        top = sorted(per_topic.items(), key=lambda kv: (-kv[1][2], -kv[1][3], -kv[1][0], -kv[1][1], kv[0]))
        return {
            "layout_at": layout.ts, "led_as_of": led_at, "complete": layout.complete,
            "partitions_led": sum(led.values()), "replicas_held": held,
            "partitions_offline": offline, "partitions_under_min_isr": under,
            "top_topics": [{"topic": name, "led": c[0], "replicas": c[1], "offline": c[2], "under_min_isr": c[3]}
                           for name, c in top[:TOP_TOPICS]],
        }
