"""How evenly the detection work spreads over Spark's tasks, counted by shard key.

    .venv/bin/python bench/shard_balance.py                        # simulate 10,000 clusters x 3, 30 s
    .venv/bin/python bench/shard_balance.py --events EVENTS.jsonl  # or count a recorded file

Each detection pass runs one task per bucket of shards (`streaming.pipeline.parse.bucket_of`, with
`spark.state_buckets` buckets; Spark then deals the buckets out to its shuffle partitions). Its
work is the items routed to each shard: the events, after the job's heartbeat thinning (per
chunk of `--chunk` events, as the parse stage does), and the hand-offs. For each layout this
prints the items routed, the number of keys, the largest key's share of all the work, and per
bucket count the largest bucket's work against the mean (the goal: at most 2x).

Layouts:
- `first pass`: the events to the cluster and target shards (`streaming.detect.shards_of`).
- `second pass`: the hand-offs to the address and cluster-id shards, as the first pass's own
  `Advertisements` and `HeldId` (streaming/detect) make them from the events, in event order.
- `one fleet shard`: the layout before the split (until 2026-11-26), for comparison: the first
  pass's shards and one `fleet` shard that got every successful response and registration.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path

from streaming.collect.simulate import FleetSpec, Simulation
from streaming.config import RuleBook, SparkConfig
from streaming.detect import Advertisements, Handoff, HeldId, redundant_heartbeats, shard_of_handoff, shards_of
from streaming.pipeline import bucket_of
from streaming.records.contract import BrokerHeartbeat, Event, MetadataResponse, event_from_dict, parse_message

START_MS = 1_764_000_000_000


def thinned(events: Iterable[Event], chunk: int) -> Iterator[Event]:
    """The events the job's parse stage keeps, chunk by chunk."""
    gap = RuleBook().shortest_session_timeout_ms - 1
    batch: list[Event] = []
    for event in events:
        batch.append(event)
        if len(batch) == chunk:
            yield from _kept(batch, gap)
            batch = []
    yield from _kept(batch, gap)


def _kept(batch: list[Event], gap: int) -> list[Event]:
    drop = redundant_heartbeats(batch, gap)
    return [e for i, e in enumerate(batch) if i not in drop]


class SecondPass:
    """The hand-offs of the first pass, made by the objects its cluster and target shards keep."""

    def __init__(self, ttl_ms: int) -> None:
        self.ttl_ms = ttl_ms
        self.advertisements: dict[str, Advertisements] = defaultdict(Advertisements)
        self.held: dict[str, HeldId] = defaultdict(HeldId)

    def keys(self, event: Event) -> list[str]:
        changes: list[Handoff] = []
        if isinstance(event, MetadataResponse) and event.ok and event.cluster_id:
            if event.brokers:
                changes += self.advertisements[event.cluster_id].listed(event.cluster_id, event.brokers, event.ts,
                                                                        self.ttl_ms, event.target, ())
            if event.expected is None:
                changes += self.held[event.target].on_bootstrap(event, self.ttl_ms, ())
        elif isinstance(event, BrokerHeartbeat) and event.kind == "registration" and event.endpoints:
            changes += self.advertisements[event.cluster_id].registered(
                event.cluster_id, event.broker_id, frozenset(e.address for e in event.endpoints), event.ts,
                self.ttl_ms, ())
        return [shard_of_handoff(change) for change in changes]


def count(events: Iterable[Event]) -> dict[str, Counter[str]]:
    work: dict[str, Counter[str]] = {name: Counter() for name in ("first pass", "second pass", "one fleet shard")}
    second = SecondPass(RuleBook().defaults.state_ttl_ms)
    for event in events:
        keys = shards_of(event)
        work["first pass"].update(keys)
        work["second pass"].update(second.keys(event))
        fleet_wide = (isinstance(event, MetadataResponse) and event.ok and event.cluster_id) or (
            isinstance(event, BrokerHeartbeat) and event.kind == "registration" and event.endpoints)
        work["one fleet shard"].update([*keys, "fleet"] if fleet_wide else keys)
    return work


def by_bucket(work: Counter[str], buckets: int) -> Counter[int]:
    out: Counter[int] = Counter()
    for key, n in work.items():
        out[bucket_of(key, buckets)] += n
    return out


def report(work: dict[str, Counter[str]], bucket_counts: list[int]) -> None:
    head = "".join(f"{f'{b} buckets':>13}" for b in bucket_counts)
    print(f"{'layout':<18}{'routed':>10}{'keys':>8}{'top key':>9}{'largest task':>14}{head}")
    print(f"{'':<18}{'':>10}{'':>8}{'':>9}{f'({bucket_counts[0]} buckets)':>14}"
          f"{'(largest bucket / mean)':>{13 * len(bucket_counts)}}")
    for name, counts in work.items():
        total = sum(counts.values())
        if not total:
            print(f"{name:<18}{0:>10}")
            continue
        top = counts.most_common(1)[0][1]
        largest = [max(by_bucket(counts, b).values()) for b in bucket_counts]
        ratios = "".join(f"{n / (total / b):>13.2f}" for n, b in zip(largest, bucket_counts, strict=True))
        print(f"{name:<18}{total:>10}{len(counts):>8}{top / total:>8.1%}{largest[0]:>14}{ratios}")
    for name in ("first pass", "second pass"):
        counts = work[name]
        print(f"\nlargest keys, {name}:", ", ".join(f"{k} {n / sum(counts.values()):.2%}"
                                                  for k, n in counts.most_common(3)))


def simulated(clusters: int, brokers: int, duration_s: int) -> Iterator[Event]:
    spec = FleetSpec(clusters=clusters, brokers=brokers, faults=(), start_ms=START_MS,
                     duration_ms=duration_s * 1000)
    for _, ev in Simulation(spec).events():
        yield event_from_dict(ev)


def recorded(path: Path) -> Iterator[Event]:
    with path.open("rb") as fh:
        for line in fh:
            yield parse_message(line)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=Path, help="count a recorded JSONL file instead of simulating")
    p.add_argument("--clusters", type=int, default=10_000, help="simulated clusters (default 10000)")
    p.add_argument("--brokers", type=int, default=3, help="brokers per cluster (default 3)")
    p.add_argument("--duration", type=int, default=30, help="seconds of event time to simulate (default 30)")
    p.add_argument("--chunk", type=int, default=100_000,
                   help="events per chunk for heartbeat thinning, as the job's Arrow batches (default 100000)")
    default_buckets = SparkConfig().state_buckets
    p.add_argument("--buckets", type=int, nargs="+", default=[default_buckets, 64, 256],
                   help=f"bucket counts to compare (default {default_buckets} = spark.state_buckets, 64, 256)")
    args = p.parse_args(argv)
    if args.events is not None and not args.events.is_file():
        sys.exit(f"{args.events}: no such file")
    started = time.monotonic()
    events = recorded(args.events) if args.events else simulated(args.clusters, args.brokers, args.duration)
    work = count(thinned(events, args.chunk))
    source = args.events or f"{args.clusters} clusters x {args.brokers} brokers, {args.duration} s simulated"
    print(f"{source}; counted in {time.monotonic() - started:.0f} s\n")
    report(work, args.buckets)
    return 0


if __name__ == "__main__":
    sys.exit(main())
