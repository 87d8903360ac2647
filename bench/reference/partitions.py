"""A cluster's partition layout (issue 30; README "Blast radius"): the two layout rules, and the
impact a broker incident carries, computed here from the event dicts on their own."""

from __future__ import annotations

from typing import Any

from .incidents import Incidents

__all__ = ["Layout"]

TOP = 5


def _minimum(topic: dict[str, Any], layout: dict[str, Any]) -> int:
    for value in (topic.get("min_insync"), layout.get("default_min_insync")):
        if value is not None:
            return value
    return 1  # Kafka's default min.insync.replicas


class Layout:
    def __init__(self, cluster_id: str, incidents: Incidents) -> None:
        self.cluster_id, self.inc = cluster_id, incidents
        self.latest: dict[str, Any] | None = None
        self.leads: dict[int, tuple[int, dict[str, int]]] = {}  # broker -> (ts of the layout, topic -> led)

    def on_layout(self, ev: dict[str, Any]) -> None:
        if self.latest is not None and ev["ts"] < self.latest["ts"]:
            return
        self.latest = ev
        seen: dict[int, dict[str, int]] = {}
        for topic in ev["topics"]:
            for _, leader, _, isr in topic["partitions"]:
                for node in isr:
                    led = seen.setdefault(node, {})
                    if node == leader:
                        led[topic["name"]] = led.get(topic["name"], 0) + 1
        self.leads.update({node: (ev["ts"], led) for node, led in seen.items()})
        rows = []
        for topic in ev["topics"]:
            low = _minimum(topic, ev)
            rows.append((topic["name"], sum(p[1] < 0 for p in topic["partitions"]),
                         sum(p[1] >= 0 and len(p[3]) < low for p in topic["partitions"])))
        top = [{"topic": name, "offline": off, "under_min_isr": under}
               for name, off, under in sorted(rows, key=lambda r: (-r[1], -r[2], r[0])) if off or under][:TOP]
        complete = ev.get("complete") is not False
        for rule, count, what in (("cluster.partitions_offline", sum(r[1] for r in rows), "offline (no leader)"),
                                  ("cluster.under_min_isr", sum(r[2] for r in rows), "under min.insync.replicas")):
            if count:
                self.inc.fire(rule, self.cluster_id, ev["ts"], f"{count} partition(s) of cluster {self.cluster_id} "
                              f"{what}", cluster_id=self.cluster_id, target=ev["target"], partitions=count,
                              complete=complete, top_topics=top)
            elif complete:
                self.inc.resolve(rule, self.cluster_id, ev["ts"])

    def impact(self, broker_id: int) -> dict[str, Any] | None:
        if self.latest is None:
            return None
        as_of, led = self.leads.get(broker_id, (self.latest["ts"], {}))
        topics = []
        for topic in self.latest["topics"]:
            low = _minimum(topic, self.latest)
            mine = [p for p in topic["partitions"] if broker_id in p[2]]
            others = [sum(r != broker_id for r in p[3]) for p in mine]
            offline = sum(p[1] < 0 or n == 0 for p, n in zip(mine, others, strict=True))
            under = sum(p[1] >= 0 and 0 < n < low for p, n in zip(mine, others, strict=True))
            row = {"topic": topic["name"], "led": led.get(topic["name"], 0), "replicas": len(mine),
                   "offline": offline, "under_min_isr": under}
            if row["led"] or mine:
                topics.append(row)
        return {
            "layout_at": self.latest["ts"], "led_as_of": as_of, "complete": self.latest.get("complete") is not False,
            "partitions_led": sum(led.values()), "replicas_held": sum(r["replicas"] for r in topics),
            "partitions_offline": sum(r["offline"] for r in topics),
            "partitions_under_min_isr": sum(r["under_min_isr"] for r in topics),
            "top_topics": sorted(topics, key=lambda r: (-r["offline"], -r["under_min_isr"], -r["led"], -r["replicas"],
                                                        r["topic"]))[:TOP],
        }
