"""`detect()`: the engines of engine.py over a list of events, cut into micro-batches as the Spark
job cuts its input, for tests, benchmarks and the reference comparisons."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from streaming.alert import Alert
from streaming.config import RuleBook
from streaming.contract import Event
from streaming.detect.engine import CLUSTER_PREFIX, TARGET_PREFIX, ShardEngine
from streaming.detect.holder_shard import HolderShard
from streaming.detect.routing import EVERY_SHARD, engine_for, shard_of_handoff, shards_of
from streaming.detect.shard_output import Handoff, Position
from streaming.detect.state_format import dump_engine, load_engine

__all__ = ["detect"]

FIRST_PASS = (CLUSTER_PREFIX, TARGET_PREFIX)


def detect(events: Sequence[Event], book: RuleBook | None = None, *,
           batch_size: int | None = None, pickled: bool = False) -> list[Alert]:
    """Run the engines over events in order, cut into micro-batches like the Spark job does.

    The watermark of a batch is the largest event time of the batches before it minus the
    allowed lateness; the first pass's hand-offs reach the second pass in the same batch. After
    the last batch, timers fire up to the final watermark, exactly as a live job would (the end
    of the input is not silence). `pickled`: keep the engines pickled between batches, as the
    job's state store does (what they do not pickle is cache).
    """
    book = book or RuleBook()
    lateness = book.defaults.allowed_lateness_ms
    engines: dict[str, ShardEngine | HolderShard] = {}
    alerts: list[Alert] = []
    watermark = -(2**62)
    size = batch_size or max(len(events), 1)

    def run(by_shard: dict[str, list[tuple[Position, Any]]]) -> list[Handoff]:
        every = by_shard.pop(EVERY_SHARD, [])  # to every shard of the first pass, as the job's buckets do
        for shard in dict.fromkeys([*engines, *by_shard]) if every else ():
            if shard.startswith(FIRST_PASS):
                by_shard[shard] = by_shard.get(shard, []) + every
        handoffs = []
        for shard, items in sorted(by_shard.items()):
            engine = engines.setdefault(shard, engine_for(shard))
            out = engine.process(items, watermark, book)
            alerts.extend(out.alerts)
            handoffs += out.handoffs
            if engine.forgotten(watermark, book):
                del engines[shard]  # as the job drops it
            elif pickled:
                engines[shard] = load_engine(dump_engine(engine))
        return handoffs

    for start in range(0, len(events), size):
        by_shard: dict[str, list[tuple[Position, Any]]] = defaultdict(list)
        for line, event in enumerate(events[start:start + size], start=start):
            for shard in shards_of(event):
                by_shard[shard].append((("", line), event))
        second: dict[str, list[tuple[Position, Any]]] = defaultdict(list)
        for change in run(by_shard):
            second[shard_of_handoff(change)].append(((), change))
        run(second)
        batch_max = max(e.ts for e in events[start:start + size])
        watermark = max(watermark, batch_max - lateness)
    last: dict[str, list[tuple[Position, Any]]] = defaultdict(list)
    for shard, engine in sorted(engines.items()):
        if shard.startswith(FIRST_PASS):
            out = engine.advance(watermark, book)
            alerts += out.alerts
            for change in out.handoffs:
                last[shard_of_handoff(change)].append(((), change))
    run(last)
    for shard, engine in sorted(engines.items()):
        if not shard.startswith(FIRST_PASS):
            alerts += engine.advance(watermark, book).alerts
    return sorted(alerts, key=Alert.sort_key)
