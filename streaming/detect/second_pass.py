"""Detection's second pass, run by the job's driver over each micro-batch's output rows: the address,
cluster-id and collector shards (holder_shard.py) over the first pass's hand-offs.

The first pass (streaming/pipeline/state.py, Spark's one stateful operator) hands each change to
the bucket of its holder shard as a `Kind.HANDOFFS` row, and writes its watermark per bucket. Here
each bucket runs as the first pass's bucket of the same number leaves it: its hand-offs (never
late: the first pass quarantined the late events), then every shard whose deadline that bucket's
watermark passed. Hand-offs are rare (an address or a cluster id that changes hands, a collector
that stops observing a cluster), so the driver runs them in a few milliseconds a batch, where a
second stateful operator cost every micro-batch a shuffle, a stage and a Python worker's round
trips per bucket (a third of the fixed cost of a batch: bench/batch_cost.py, issue 45).

State: the buckets' engines, in memory between batches. A live job keeps each changed bucket in
the store with the batch that changed it, in the same transaction as the batch's alerts
(`SecondPass.run` says which changed); a batch that Spark runs again after a crash starts from
the state the batch before it left (`saved`), so the second pass resumes exactly as the first does
from the checkpoint.
"""

from __future__ import annotations

import base64
import pickle
from collections import defaultdict
from collections.abc import Callable, Iterable

from streaming.config import RuleBook
from streaming.detect.buckets import NEVER_LATE, BucketEngines, ShardItems, due_shards, output_rows, run_bucket
from streaming.detect.routing import shard_of_handoff
from streaming.detect.shard_output import Handoff
from streaming.records.job_output import Kind, Row

__all__ = ["SecondPass", "handoff_rows"]

# The buckets with shards, each one's engines pickled, as a batch left them (read back from the store).
SavedBuckets = dict[int, bytes]


def handoff_rows(by_bucket: dict[int, list[Handoff]]) -> list[Row]:
    """The first pass's hand-offs, one row per second-pass bucket."""
    return [(Kind.HANDOFFS, str(bucket), None,
             base64.b64encode(pickle.dumps(changes, protocol=pickle.HIGHEST_PROTOCOL)).decode("ascii"))
            for bucket, changes in by_bucket.items()]


class SecondPass:
    """The second pass's buckets, carried from one micro-batch to the next."""

    def __init__(self, book: RuleBook) -> None:
        self.book = book
        self._engines: dict[int, BucketEngines] = {}
        self._after_batch: int | None = None  # the batch whose state `_engines` is; None: none loaded

    @property
    def buckets(self) -> int:
        """The buckets holding shards (the second pass's share of the detection state's rows)."""
        return len(self._engines)

    def run(self, batch_id: int, rows: Iterable[Row],
            saved: Callable[[], SavedBuckets] | None = None) -> tuple[list[Row], dict[int, bytes | None]]:
        """The batch's rows without its hand-offs, followed by the second pass's; and the buckets
        this batch changed (pickled; None: emptied). `saved`: the buckets as the batch before this
        one left them, read when the state in memory is not that (the first batch of a process, a
        batch run again); without it, the state in memory goes on (a replay)."""
        if saved is not None and self._after_batch != batch_id - 1:
            self._engines = {bucket: pickle.loads(data) for bucket, data in saved().items()}
        self._after_batch = None  # until this batch is through: a failure half-way reloads
        kept: list[Row] = []
        watermarks: dict[int, int] = {}
        by_bucket: dict[int, ShardItems] = defaultdict(lambda: defaultdict(list))
        for row in rows:
            kind, key = row[0], row[1]
            if kind == Kind.HANDOFFS:
                for change in pickle.loads(base64.b64decode(row[3])):
                    by_bucket[int(key)][shard_of_handoff(change)].append(((), change))
                continue
            if kind == Kind.WATERMARK and key is not None:
                watermarks[int(key)] = max(watermarks.get(int(key), NEVER_LATE), int(row[2]))
            kept.append(row)
        changed: dict[int, bytes | None] = {}
        for bucket in sorted(watermarks.keys() | by_bucket.keys()):
            engines = self._engines.get(bucket, {})
            after = watermarks.get(bucket, NEVER_LATE)
            items = by_bucket.get(bucket, {})
            if items or due_shards(engines, after):
                kept += output_rows(run_bucket(engines, items, NEVER_LATE, after, self.book))
                if engines:
                    self._engines[bucket] = engines
                    changed[bucket] = pickle.dumps(engines, protocol=pickle.HIGHEST_PROTOCOL)
                else:  # every shard of the bucket was forgotten (state TTL)
                    self._engines.pop(bucket, None)
                    changed[bucket] = None
        self._after_batch = batch_id
        return kept, changed
