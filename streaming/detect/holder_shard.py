"""The second pass's shards (`HolderShard`): who holds one address, one cluster id, or what one
collector no longer observes, as the first pass's hand-offs tell them.

- `addr:<host:port>`: `endpoint.collision` of one address (misroutes.py, `AddressHolders`);
- `dup:<cluster_id>`: `cluster.id_duplicate` of one cluster id (identity.py, `IdHolders`);
- `src:<source>`: `collector.silent` of one collector (observers.py, `SilentClusters`).
"""

from __future__ import annotations

from collections.abc import Iterable

from streaming.config import RuleBook
from streaming.detect.alerts import Emitter, Incidents
from streaming.detect.identity import IdHolders
from streaming.detect.misroutes import AddressHolders
from streaming.detect.naming import NO_CONFIG, book_names
from streaming.detect.observers import SilentClusters
from streaming.detect.shard_output import Forgettable, Handoff, Position, ShardOutput
from streaming.records.alert import EVENT_PHASE, TIMER_PHASE

__all__ = ["ADDRESS_PREFIX", "ID_PREFIX", "SOURCE_PREFIX", "HolderShard"]

ADDRESS_PREFIX = "addr:"
ID_PREFIX = "dup:"
SOURCE_PREFIX = "src:"


class HolderShard(Forgettable):
    """A second-pass shard: the pairs advertising one address (`addr:`), the targets holding one cluster
    id (`dup:`), or the clusters one collector no longer observes (`src:`), as the first pass's hand-offs
    tell it; the same interface as `ShardEngine`. Its deadline: while its alert is open, the lease end
    that resolves it (of a collector's: its earliest hand-off waiting for the watermark)."""

    def __init__(self, shard: str) -> None:
        self.shard = shard
        self._start()

    def _start(self, book: RuleBook = NO_CONFIG) -> None:
        self.last_event_ms: int | None = None
        self.incidents = Incidents()
        self.incidents.names = book_names(book)  # not pickled: set again at each step
        self.holders: AddressHolders | IdHolders | SilentClusters = (
            AddressHolders(self.shard.removeprefix(ADDRESS_PREFIX)) if self.shard.startswith(ADDRESS_PREFIX)
            else SilentClusters(self.shard.removeprefix(SOURCE_PREFIX)) if self.shard.startswith(SOURCE_PREFIX)
            else IdHolders(self.shard.removeprefix(ID_PREFIX)))

    def next_deadline(self, book: RuleBook) -> int | None:
        due = self.holders.deadline(self.incidents)
        return due if due is not None else self._forget_at(book)  # nothing open: the state TTL

    def advance(self, watermark: int, book: RuleBook) -> ShardOutput:
        self.incidents.names = book_names(book)
        out = Emitter(cause=(TIMER_PHASE, ()))
        self._advance_to(watermark, out)
        return ShardOutput(alerts=out.alerts)

    def _advance_to(self, now: int, out: Emitter) -> None:
        while (due := self.holders.deadline(self.incidents)) is not None and due < now:
            self.holders.on_time(due, self.incidents, out)

    def process(self, handoffs: Iterable[tuple[Position, Handoff]], watermark: int, book: RuleBook) -> ShardOutput:
        """Apply one micro-batch's hand-offs, in the order of the events they come from, after the
        deadline the watermark passed. (None is late: the first pass quarantined the late events.)"""
        self.incidents.names = book_names(book)
        timers = Emitter(cause=(TIMER_PHASE, ()))
        self._advance_to(watermark, timers)
        out = Emitter()
        ttl = book.defaults.state_ttl_ms
        in_time = not isinstance(self.holders, SilentClusters)  # (which applies them by the watermark only)
        for change in sorted((change for _, change in handoffs), key=lambda c: (c.ts, c.position, c.seq)):
            if in_time:
                self._advance_to(change.ts, timers)  # a deadline the hand-off proves passed
            if self.last_event_ms is not None and change.ts - self.last_event_ms > ttl:
                self._start(book)  # quiet for longer than the TTL: every lease has ended, nothing is open
            if self.last_event_ms is None or change.ts > self.last_event_ms:
                self.last_event_ms = change.ts
            out.cause = (EVENT_PHASE, (change.ts, *change.position))
            self.holders.apply(change, self.incidents, out)  # type: ignore[arg-type]
        return ShardOutput(alerts=timers.alerts + out.alerts)
