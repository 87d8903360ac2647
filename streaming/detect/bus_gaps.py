"""Records the bus dropped before the job read them, told apart from silence (issue 27).

When retention or DeleteRecords removes records of a telemetry partition the job had not read
(it was stopped, or behind), both sources skip to what the bus still holds. Detection then sees
nothing of that partition's clusters for the lost time: without knowing why, it takes the
blindness for silence and fires `broker.heartbeat_lost` for every broker whose heartbeats were
lost. So the job follows the offsets it reads per bus partition ("topic:partition"), and a jump
tells detection where it was blind (`BusGap`): a broker session restarts at the gap's end.

What counts as lost: the telemetry topics hold plain records (no transactions, no compaction, as
streaming/source/bus_loss.py counts them), so a partition's offsets go up by one per record, and a jump
means the records between are gone from the bus. One missing offset is not taken for a loss: it is
what a transactional producer's commit marker leaves, and treating every marker as blindness would
keep restarting the sessions of that partition's brokers, hiding a real silence; a lost record or
two mean a blind time too short to matter. A partition whose offsets went back started over (its
topic deleted and created again): what it held before is gone too.

`ReadPositions` is per bucket of detection state (streaming/pipeline/state.py): every bucket
follows every partition, since a cluster whose brokers all fell silent sends its bucket nothing
(a bucket without shards keeps none: a shard new there has no session to restart).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["BusGap", "ReadPositions", "Run"]

class Run(NamedTuple):
    """A run of consecutive offsets read from one bus partition ("topic:partition"), with the event times
    of its first valid event, of its last one and the largest among them (None without any). The
    parse stage ships it as a plain tuple (marshal takes no other); `Run._make` reads it back."""

    source: str
    first: int
    last: int
    first_ts: int | None
    last_ts: int | None
    largest_ts: int | None

# The fewest missing offsets taken for lost records (see the docstring).
_MIN_LOST = 2


@dataclass(frozen=True)
class BusGap:
    """Records of bus partition `source` lost unread, between the valid event read at event time
    `ts` and the one read at `until_ms`, in the run from offset `offset`."""

    source: str
    ts: int
    until_ms: int
    offset: int


class ReadPositions:
    """Where the job's reading of each bus partition stands: {source: (last offset read, event time
    of the last valid event read, whether a gap is open)}. A gap stays open while the records after
    it carry no valid event: its end is the first event time read after it."""

    def __init__(self, at: dict[str, tuple[int, int | None, bool]] | None = None) -> None:
        self.at = {} if at is None else at

    def advance(self, runs: Iterable[Run]) -> list[BusGap]:
        """Take one micro-batch's runs (in any order); the gaps before them."""
        gaps = []
        for source, first, last, first_ts, last_ts, _ in sorted(runs, key=lambda r: (r.source, r.first)):
            known = self.at.get(source)
            if known is None:  # a partition never read, or a state from before positions were kept
                self.at[source] = (last, last_ts, False)
                continue
            offset, ts, open_gap = known
            # Before any valid event of the partition, no rule knows of it: nothing to be blind to.
            open_gap = ts is not None and (open_gap or first - offset - 1 >= _MIN_LOST or first <= offset)
            if open_gap and ts is not None and first_ts is not None:
                gaps.append(BusGap(source, ts, first_ts, first))
                open_gap = False
            self.at[source] = (last, ts if last_ts is None else last_ts, open_gap)
        return gaps
