"""Which heartbeats the rules cannot tell from their neighbours, so the job can drop them early.

Heartbeats are two thirds of a fleet's telemetry (one per broker every 2 s) and nearly all of
them only say "still alive, nothing changed". In a chunk of events, a plain heartbeat is
redundant when the previous heartbeat (or registration) of its broker kept in the chunk says
the same thing and the next one comes at most `max_gap_ms` after that kept one. Give
`max_gap_ms` less than the shortest session timeout and every rule decides as before:

- heartbeat lost: between kept heartbeats that had dropped ones between them, no moment is
  `session_timeout_ms` after the last kept one, and a real gap longer than `max_gap_ms` keeps
  both its ends, so the alert starts (last heartbeat + timeout) and resolves (next heartbeat)
  at the same times;
- partitioned (answering while heartbeat-lost or fenced): "heartbeat-lost" holds at exactly
  the same moments, by the argument above; fenced flags are content;
- epoch regression, fenced, rack and endpoints: any change of content is kept, and so is
  every registration (it bumps the epoch); the last heartbeat of each broker is always kept.

Out-of-order heartbeats are never dropped.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from itertools import pairwise

from streaming.contract import BrokerHeartbeat, Event

__all__ = ["redundant_heartbeats"]


def _content(hb: BrokerHeartbeat) -> tuple[object, ...]:
    # Everything a rule or a snapshot reads, except the time (metadata_offset is read by neither).
    return hb.kind, hb.source, hb.broker_epoch, hb.fenced, hb.rack, hb.endpoints


def redundant_heartbeats(events: Sequence[Event], max_gap_ms: int) -> set[int]:
    """Indices (into `events`, in arrival order) of the heartbeats that can be dropped."""
    by_broker: dict[tuple[str | None, int], list[tuple[int, BrokerHeartbeat]]] = defaultdict(list)
    for i, event in enumerate(events):
        if isinstance(event, BrokerHeartbeat):
            by_broker[(event.cluster_id, event.broker_id)].append((i, event))
    drop: set[int] = set()
    for heartbeats in by_broker.values():
        kept = heartbeats[0][1]
        # The first and the last heartbeat of a broker are always kept.
        for (i, hb), (_, following) in pairwise(heartbeats[1:]):
            if (hb.kind == "heartbeat" and _content(hb) == _content(kept)
                    and kept.ts <= hb.ts <= following.ts and following.ts - kept.ts <= max_gap_ms):
                drop.add(i)
            else:
                kept = hb
    return drop
