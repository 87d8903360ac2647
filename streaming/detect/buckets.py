"""One bucket of shards over one micro-batch, as both passes run it: the first pass in Spark's
workers (streaming/pipeline/state.py), the second in the job's driver (second_pass.py).

A bucket's engines are kept pickled between micro-batches, each beside its next deadline, so that
a bucket finds the shards it must wake without loading the others. Its output rows are those of
streaming/records/job_output.py.
"""

from __future__ import annotations

from typing import Any

from streaming.config import RuleBook
from streaming.detect.routing import engine_for
from streaming.detect.shard_output import Position, ShardOutput
from streaming.detect.state_format import dump_engine, load_engine
from streaming.records.contract import event_to_dict
from streaming.records.job_output import (
    Kind,
    LateEvent,
    Row,
    StateRow,
    alert_row,
    compact_json,
    history_row,
)

__all__ = ["NEVER_LATE", "BucketEngines", "ShardItems", "due_shards", "output_rows", "run_bucket"]

# {shard: (its next deadline or None, its engine pickled)}
BucketEngines = dict[str, tuple[int | None, bytes]]
ShardItems = dict[str, list[tuple[Position, Any]]]  # a shard's events (or hand-offs), each at its position
# The watermark nothing is late against (a bucket new to its clock; every hand-off).
NEVER_LATE = -(2**62)


def _step(engines: BucketEngines, shard: str, items: list[tuple[Position, Any]] | None, watermark: int,
          book: RuleBook) -> ShardOutput:
    """Process a shard's events or hand-offs (or, with None, only its due deadlines) and keep the engine back."""
    stored = engines.get(shard)
    engine = load_engine(stored[1]) if stored is not None else engine_for(shard)
    out = engine.advance(watermark, book) if items is None else engine.process(items, watermark, book)
    if engine.forgotten(watermark, book):
        engines.pop(shard, None)  # quiet for longer than the state TTL, nothing open
    else:
        engines[shard] = (engine.next_deadline(book), dump_engine(engine))
    engine.release()
    return out


def due_shards(engines: BucketEngines, after: int) -> list[str]:
    """The bucket's shards whose deadline the watermark `after` passed."""
    return [shard for shard, (deadline, _) in engines.items() if deadline is not None and deadline < after]


def run_bucket(engines: BucketEngines, by_shard: ShardItems, before: int, after: int,
               book: RuleBook) -> list[ShardOutput]:
    """The bucket's shards with items, late against `before` (the watermark before the micro-batch),
    then every shard whose deadline `after` (the watermark after it) passed. `engines` is updated."""
    outputs = [_step(engines, shard, items, before, book) for shard, items in by_shard.items()]
    return outputs + [_step(engines, shard, None, after, book) for shard in due_shards(engines, after)]


def _rows(out: ShardOutput) -> list[Row]:
    rows = [alert_row(a) for a in out.alerts]
    rows += [LateEvent(f"{src}:{pos}", event.ts, compact_json(event_to_dict(event))).output()
             for (src, pos), event in out.late]
    for kind, snapshots in ((Kind.BROKER, out.brokers), (Kind.CLUSTER, out.clusters), (Kind.TARGET, out.targets)):
        rows += [StateRow.of(kind, snapshot).output() for snapshot in snapshots]
    rows += [history_row(Kind.TRANSITION, item) for item in out.transitions]
    rows += [history_row(Kind.CONTROLLER, item) for item in out.controller_changes]
    return rows


def output_rows(outputs: list[ShardOutput]) -> list[Row]:
    """The output rows of a bucket's shards (their hand-offs apart)."""
    return [row for out in outputs for row in _rows(out)]
