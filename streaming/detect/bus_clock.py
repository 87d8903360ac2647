"""Detection's own watermark: the event time every bus partition has been read to (issue 41).

Spark's watermark is one number for the whole query: the largest event time seen, minus the
allowed lateness. It assumes every partition is read up to about the same moment. A micro-batch
planned under a cap (`spark.max_records_per_batch`: a job restarted onto a backlog bigger than
one batch) does not read them so: both readers give each partition a share of the cap in
proportion to its backlog in *records* (Spark's connector, `maxOffsetsPerTrigger`; the Python
reader, `streaming.source.kafka_offsets.allocate`), so a sparse partition (broker states) or one
with a burst is read minutes ahead of, or behind, the busy ones. Against the largest event time,
what the others still hold is late: broker states were quarantined as late, heartbeats missed
their session, and healthy brokers were paged (22 false critical alerts measured on main 69ef28b).

So detection keeps a watermark of its own, from the reads every bucket of the first pass gets
(`Run`s: each chunk's runs of offsets per partition, with their largest valid event time):
- After a micro-batch that cannot have been capped, every partition was read to where it stood
  when the batch was planned: the clock moves, like Spark's, to the largest event time read.
- After one that may have been capped, it moves to the *smallest* of the largest event times
  the partitions read in that batch have reached. A partition with a backlog is in every capped
  batch (both readers give every partition with unread records a share of at least one record),
  so one that is not in it had nothing left to read, and holds nothing back.
- A batch may have been capped when it read at least the cap less three offsets per partition it
  read: a share rounds down by less than one record, and a transaction marker at either end of a
  range reads as two offsets fewer. Telling an uncapped batch near the cap for capped costs only
  time (the clock waits for the next batch); the other way round would be wrong, and cannot be.
- It never moves back, and a partition read only as invalid messages (no event time) holds it
  where it is while the batch may have been capped.

The result: whatever the cap and the backlog, an event is late only against the event time that
every partition has reached, and a deadline falls due only when no partition can still hold an
event before it: the alerts and the quarantine are those of reading the same records in one
batch (SPEC section 4, "Resuming changes nothing"). Why this, and not ending every batch's
partitions at one event-time horizon (ListOffsets by timestamp): Tansu answers every ListOffsets
by timestamp with offset 0 (NOTES.md), and Spark's connector plans its own offsets; the reads
are what both sources share. A batch run again after a crash reads the same offsets: it decides
the same.

The clock is kept per bucket beside its engines (streaming/pipeline/state.py); every bucket reads
every chunk's runs, so every bucket that keeps one keeps the same clock (one without shards keeps
none, and starts again from what it reads: never ahead of the others).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from streaming.detect.bus_gaps import Run

__all__ = ["BusClock", "may_be_capped"]

# Offsets a capped batch may read short of its cap, per partition it reads (see the docstring).
_SHORT_PER_PARTITION = 3


def may_be_capped(spans: dict[str, int], cap: int | None) -> bool:
    """Whether a micro-batch that read `spans` offsets per partition may have been cut by `cap`."""
    return cap is not None and sum(spans.values()) >= cap - _SHORT_PER_PARTITION * len(spans)


@dataclass
class BusClock:
    """`watermark`: detection's watermark (None: not known yet); `reached`: the largest valid event
    time read per bus partition ("topic:partition")."""

    watermark: int | None = None
    reached: dict[str, int] = field(default_factory=dict)

    def advance(self, runs: Iterable[Run], cap: int | None, lateness_ms: int) -> bool:
        """Take one micro-batch's reads (every chunk's runs) into `watermark`; whether the batch may
        have been capped (then the partitions it read stand at different event times, and only what is
        before the new watermark is known to be read in event-time order)."""
        first: dict[str, int] = {}
        last: dict[str, int] = {}
        for run in runs:
            source = run.source
            first[source] = min(first.get(source, run.first), run.first)
            last[source] = max(last.get(source, run.last), run.last)
            largest = run.largest_ts
            if largest is not None and largest > self.reached.get(source, largest - 1):
                self.reached[source] = largest
        if not first:
            return False
        capped = may_be_capped({source: last[source] - first[source] + 1 for source in first}, cap)
        if capped:
            if any(source not in self.reached for source in first):
                return True  # a partition read so far without an event time: it may hold any
            horizon = min(self.reached[source] for source in first)
        elif self.reached:
            horizon = max(self.reached.values())
        else:
            return False
        if self.watermark is None or horizon - lateness_ms > self.watermark:
            self.watermark = horizon - lateness_ms
        return capped

    def dump(self) -> tuple[int | None, dict[str, int]]:
        """As the state store keeps it: builtins only, no class to keep loadable."""
        return self.watermark, dict(self.reached)

    @classmethod
    def load(cls, kept: tuple[int | None, dict[str, int]] | None) -> BusClock:
        return cls() if kept is None else cls(kept[0], dict(kept[1]))
