"""How evenly the detection work spreads over Spark's tasks, counted by shard key.

    .venv/bin/python bench/shard_balance.py                        # simulate 10,000 clusters x 3, 30 s
    .venv/bin/python bench/shard_balance.py --events EVENTS.jsonl  # or count a recorded file

The detection stage runs one task per bucket of shards (`streaming.pipeline.parse.bucket_of`, with
`spark.state_buckets` buckets; Spark then deals the buckets out to its shuffle partitions). Its
work is the events routed to each shard, after the job's heartbeat thinning (per chunk of
`--chunk` events, as the parse stage does). For each layout this prints the events routed, the
number of keys, the largest key's share of all the work, and per bucket count the largest
bucket's work against the mean (the goal: at most 2x).

Layouts:
- `one pass`: `streaming.detect.engine.shards_of` as the job routes today: cluster and target
  shards, and the one `fleet` shard that gets every successful response and registration.
- `two passes, 1st` / `2nd`: the fleet-wide rules split by what they compare (see
  streaming/detect/README.md, "Shards and scale-out"): the first pass is the cluster and target
  shards, which already see every event that can change an advertisement or a held cluster id
  and keep the previous one; they hand on only the changes, to `addr:<host:port>` shards
  (endpoint.collision) and `dup:<cluster id>` shards (cluster.id_duplicate), the old key and the
  new one. The second pass's input is modelled here (what changed since the last event of the
  same pair or target), not run.
- `fleet x16`: one pass with the fleet shard split into 16 buckets by a hash of the address: to be
  exact every advertising event must reach every such bucket (the previous address of a pair is
  not in the event), so each carries the whole fleet's share.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

from streaming.collect.simulate import FleetSpec, Simulation
from streaming.config import RuleBook, SparkConfig
from streaming.contract import BrokerHeartbeat, Event, MetadataResponse, event_from_dict, parse_message
from streaming.detect import FLEET_SHARD, redundant_heartbeats, shards_of
from streaming.pipeline import bucket_of

START_MS = 1_764_000_000_000
FLEET_BUCKETS = 16


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


def advertised(event: Event) -> list[tuple[str, int, frozenset[str]]]:
    """(cluster id, node id, host:port set) of each advertisement an event makes."""
    if isinstance(event, MetadataResponse) and event.ok and event.cluster_id:
        return [(event.cluster_id, b.node_id, frozenset((b.address,))) for b in event.brokers or ()]
    if isinstance(event, BrokerHeartbeat) and event.kind == "registration" and event.endpoints and event.cluster_id:
        return [(event.cluster_id, event.broker_id, frozenset(e.address for e in event.endpoints))]
    return []


class Changes:
    """The second pass's input in a two-pass layout: the keys each event's changes go to."""

    def __init__(self) -> None:
        self.adverts: dict[tuple[str, int], frozenset[str]] = {}
        self.held: dict[str, tuple[str, frozenset[str]]] = {}

    def keys(self, event: Event) -> set[str]:
        out: set[str] = set()
        for cluster_id, node_id, new in advertised(event):
            old = self.adverts.get((cluster_id, node_id), frozenset())
            if new != old:
                self.adverts[(cluster_id, node_id)] = new
                out |= {f"addr:{a}" for a in old ^ new}
        if isinstance(event, MetadataResponse) and event.ok and event.cluster_id and event.expected is None:
            holding = (event.cluster_id, frozenset(b.address for b in event.brokers or ()))
            before = self.held.get(event.target)
            if holding != before:
                self.held[event.target] = holding
                out |= {f"dup:{holding[0]}"} | ({f"dup:{before[0]}"} if before else set())
        return out


def count(events: Iterable[Event]) -> dict[str, Counter[str]]:
    work: dict[str, Counter[str]] = {name: Counter() for name in
                                     ("one pass", "two passes, 1st", "two passes, 2nd", f"fleet x{FLEET_BUCKETS}")}
    changes = Changes()
    for event in events:
        keys = shards_of(event)
        work["one pass"].update(keys)
        work["two passes, 1st"].update(k for k in keys if k != FLEET_SHARD)
        work["two passes, 2nd"].update(changes.keys(event))
        unsplit = [k for k in keys if k != FLEET_SHARD]
        fleet = [f"fleet:{i}" for i in range(FLEET_BUCKETS)] if FLEET_SHARD in keys else []
        work[f"fleet x{FLEET_BUCKETS}"].update(unsplit + fleet)
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
    one_pass = work["one pass"]
    print("\nlargest keys, one pass:", ", ".join(f"{k} {n / sum(one_pass.values()):.1%}"
                                               for k, n in one_pass.most_common(3)))


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
