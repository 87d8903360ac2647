"""Event-time disorder of the telemetry as the job meets it, and how late it reaches the bus.

    .venv/bin/python bench/disorder.py                      # the live simulator, 1,000 x 12 for 60 s
    .venv/bin/python bench/disorder.py --clusters 10 --seconds 30 --json

The job's watermark is the largest event time it has read minus `allowed_lateness_ms`, and an
event whose time is behind the watermark when it arrives is late (quarantined, `late_event`). So
the lateness must cover how far an event's time lies behind the largest event time sent before
it. This reads every telemetry record back from the bus in the order it was sent (the record's
CreateTime, the producer's clock when it sent it) and prints, over all events and per type:
- behind: for each event, the largest event time sent before it minus its own (only those > 0);
- send delay: the record's CreateTime minus the event's `ts`: how long after its time an event
  was sent (stamped and sent on one clock for the simulator and for the probe, so no skew).

This script measures the simulator, produced live into an embedded broker; `bench/real_faults.py`
measures the probe of a real Kafka 4.4 cluster under real faults with the same arithmetic.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import defaultdict
from typing import Any, NamedTuple

import orjson
from kafka import KafkaConsumer, TopicPartition

# bench/ is this script's folder, first on sys.path when it runs.
from throughput_measures import percentile

from streaming.bus import EmbeddedBus
from streaming.records import topics

__all__ = ["SentEvent", "disorder", "read_sent", "report"]


class SentEvent(NamedTuple):
    """One telemetry record: when it was sent (its CreateTime), its event's time and type, and
    the record's value when it was asked for."""

    created: int
    ts: int
    type: str
    value: bytes | None = None


def read_sent(bootstrap: str, idle_polls: int = 6, *, values: bool = False) -> list[SentEvent]:
    """Every telemetry record on the bus, in the order they were sent; `values`: with the records'
    values. Records that are no JSON object with an integer `ts` are left out (the job quarantines them)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                             client_id="fleetwatch-bench-disorder")
    try:
        partitions = [TopicPartition(topic, p) for topic in topics.TELEMETRY
                      for p in consumer.partitions_for_topic(topic) or ()]
        consumer.assign(partitions)
        consumer.seek_to_beginning()
        ends = consumer.end_offsets(partitions)
        sent: list[SentEvent] = []
        idle = 0
        while idle < idle_polls and any(consumer.position(tp) < end for tp, end in ends.items()):
            got = consumer.poll(timeout_ms=500, max_records=50_000)
            idle = 0 if got else idle + 1
            for records in got.values():
                for record in records:
                    try:
                        event = orjson.loads(record.value)
                    except orjson.JSONDecodeError:
                        continue
                    if isinstance(event, dict) and type(event.get("ts")) is int:
                        sent.append(SentEvent(record.timestamp, event["ts"], str(event.get("type")),
                                              record.value if values else None))
    finally:
        consumer.close()
    sent.sort(key=lambda item: item.created)  # a stable sort: records sent in one millisecond keep their order
    return sent


def _spread(values: list[int]) -> dict[str, int]:
    if not values:
        return {"p50": 0, "p99": 0, "p99_9": 0, "max": 0}
    return {"p50": int(percentile(values, 0.5)), "p99": int(percentile(values, 0.99)),
            "p99_9": int(percentile(values, 0.999)), "max": max(values)}


def disorder(sent: list[SentEvent]) -> dict[str, Any]:
    """The disorder and send delay of `sent` (in send order), over all events and per type."""
    behind: dict[str, list[int]] = defaultdict(list)
    delay: dict[str, list[int]] = defaultdict(list)
    counts: dict[str, int] = defaultdict(int)
    top: int | None = None
    for created, ts, kind, _ in sent:
        counts[kind] += 1
        if top is not None and top > ts:
            behind[kind].append(top - ts)
        top = ts if top is None or ts > top else top
        delay[kind].append(created - ts)

    def summary(kinds: list[str]) -> dict[str, Any]:
        events = sum(counts[k] for k in kinds)
        late = [v for k in kinds for v in behind[k]]
        return {"events": events, "behind_share": round(len(late) / events, 4) if events else 0.0,
                "behind_ms": _spread(late), "send_delay_ms": _spread([v for k in kinds for v in delay[k]])}

    return {**summary(sorted(counts)), "by_type": {kind: summary([kind]) for kind in sorted(counts)}}


def _line(name: str, row: dict[str, Any]) -> str:
    b, d = row["behind_ms"], row["send_delay_ms"]
    return (f"{name:<18} {row['events']:>9,}  behind {100 * row['behind_share']:5.1f}%: p50 {b['p50']:>5} "
            f"p99 {b['p99']:>5} p99.9 {b['p99_9']:>5} max {b['max']:>5} ms   send delay p50 {d['p50']:>6} "
            f"p99 {d['p99']:>6} max {d['max']:>6} ms")


def report(result: dict[str, Any]) -> str:
    """`disorder`'s result as lines, all events first."""
    return "\n".join([_line("all", result), *(_line(kind, row) for kind, row in result["by_type"].items())])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--clusters", type=int, default=1000, help="simulated clusters (default 1000)")
    parser.add_argument("--brokers", type=int, default=12, help="brokers per cluster (default 12)")
    parser.add_argument("--seconds", type=int, default=60, help="how long the fleet runs (default 60)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    args = parser.parse_args(argv)
    if min(args.clusters, args.brokers, args.seconds) < 1:
        parser.error("--clusters, --brokers and --seconds must be at least 1")
    with EmbeddedBus(topics=topics.ALL, partitions=4) as bus:
        print(f"simulating {args.clusters} x {args.brokers} for {args.seconds} s, live, into {bus.bootstrap}",
              file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "streaming.cli", "simulate", "--bootstrap", bus.bootstrap,
                        "--clusters", str(args.clusters), "--brokers", str(args.brokers), "--faults", "all",
                        "--duration", str(args.seconds), "--fault-every", "1"],
                       check=True, stdout=subprocess.DEVNULL, stderr=sys.stderr)
        print("reading the telemetry back", file=sys.stderr, flush=True)
        sent = read_sent(bus.bootstrap)
    result = {"fleet": f"{args.clusters}x{args.brokers}", "seconds": args.seconds, **disorder(sent)}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"the simulator, {result['fleet']} for {args.seconds} s, in send order:")
        print(report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
