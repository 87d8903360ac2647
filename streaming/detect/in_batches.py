"""`detect()`: the engines of engine.py over a list of events, cut into micro-batches as the Spark
job cuts its input, for tests, benchmarks and the reference comparisons."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from streaming.config import RuleBook
from streaming.detect.engine import CLUSTER_PREFIX, TARGET_PREFIX, ShardEngine
from streaming.detect.holder_shard import HolderShard
from streaming.detect.routing import EVERY_SHARD, engine_for, shard_of_handoff, shards_of
from streaming.detect.shard_output import Handoff, Position
from streaming.detect.state_format import dump_engine, load_engine
from streaming.records.alert import Alert
from streaming.records.contract import Event

__all__ = ["detect"]

FIRST_PASS = (CLUSTER_PREFIX, TARGET_PREFIX)


def detect(events: Sequence[Event], book: RuleBook | None = None, *,
           batch_size: int | None = None, pickled: bool = False) -> list[Alert]:
    """Run the engines over events in order, cut into micro-batches like the Spark job does.

    A batch's events are late against the watermark before it (the largest event time of the batches
    before it minus the allowed lateness); then every deadline the watermark after it passed falls
    due, and the first pass's hand-offs reach the second pass, in the same batch, as the job's
    buckets run them. The last batch's timers fire up to the final watermark, exactly as a live job's
    would (the end of the input is not silence). `pickled`: keep the engines pickled between batches, as the
    job's state store does (what they do not pickle is cache).
    """
    book = book or RuleBook()
    lateness = book.defaults.allowed_lateness_ms
    engines: dict[str, ShardEngine | HolderShard] = {}
    alerts: list[Alert] = []
    watermark = -(2**62)
    size = batch_size or max(len(events), 1)

    def run(by_shard: dict[str, list[tuple[Position, Any]]], before: int, after: int, first: bool) -> list[Handoff]:
        """The shards of one pass with items (late against `before`), then every shard of that pass
        whose deadline `after` passed, as the job's buckets run them (streaming/pipeline/state.py)."""
        every = by_shard.pop(EVERY_SHARD, [])  # to every shard of the first pass, as the job's buckets do
        for shard in dict.fromkeys([*engines, *by_shard]) if every else ():
            if shard.startswith(FIRST_PASS):
                by_shard[shard] = by_shard.get(shard, []) + every
        handoffs: list[Handoff] = []

        def step(shard: str, items: list[tuple[Position, Any]] | None) -> None:
            engine = engines.setdefault(shard, engine_for(shard))
            out = engine.process(items, before, book) if items is not None else engine.advance(after, book)
            alerts.extend(out.alerts)
            handoffs.extend(out.handoffs)
            if engine.forgotten(before if items is not None else after, book):
                del engines[shard]  # as the job drops it
            elif pickled:
                engines[shard] = load_engine(dump_engine(engine))

        for shard, items in sorted(by_shard.items()):
            step(shard, items)
        for shard in sorted(shard for shard, engine in engines.items() if shard.startswith(FIRST_PASS) == first
                            and (deadline := engine.next_deadline(book)) is not None and deadline < after):
            step(shard, None)
        return handoffs

    for start in range(0, len(events), size):
        batch = events[start:start + size]
        by_shard: dict[str, list[tuple[Position, Any]]] = defaultdict(list)
        for line, event in enumerate(batch, start=start):
            for shard in shards_of(event):
                by_shard[shard].append((("", line), event))
        after = max(watermark, max(e.ts for e in batch) - lateness)
        second: dict[str, list[tuple[Position, Any]]] = defaultdict(list)
        for change in run(by_shard, watermark, after, first=True):
            second[shard_of_handoff(change)].append(((), change))
        run(second, -(2**62), after, first=False)  # a hand-off is never late
        watermark = after
    return sorted(alerts, key=Alert.sort_key)
