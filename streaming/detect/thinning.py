"""Which heartbeats the rules cannot tell from their neighbours, so the job can drop them early.

Heartbeats are two thirds of a fleet's telemetry (one per broker every 2 s) and nearly all of
them only say "still alive, nothing changed". In a chunk of events, taken in event-time order
(the order the engine applies them in), a plain heartbeat is redundant when it says the same
thing as the previous heartbeat (or registration) of its broker kept in the chunk and as the next
one, and that next one comes at most `max_gap_ms` after the kept one. Give `max_gap_ms` less than
the shortest session timeout (and than the shortest `resolve_after_ms`, for the epoch argument
below) and every rule decides as before:

- heartbeat lost: between kept heartbeats that had dropped ones between them, no moment is
  `session_timeout_ms` after the last kept one, and a real gap longer than `max_gap_ms` keeps
  both its ends, so the alert starts (last heartbeat + timeout) and resolves (next heartbeat)
  at the same times;
- partitioned (answering while heartbeat-lost or fenced): "heartbeat-lost" holds at exactly
  the same moments, by the argument above; fenced flags are content;
- epoch regression: a dropped heartbeat is a regression exactly when the next one is (same
  epoch, later, and the highest epoch only grows), and that next one moves the last regression
  on past it, so the alert resolves at the same moment; the last of a run of equal heartbeats is
  never dropped, nor is any change of content (fenced, rack, endpoints), nor a registration (it
  bumps the epoch); the first and the last heartbeat of each broker in a chunk are always kept;
- stalled (issue 44) is decided by quorum readings, which are no heartbeats here: their fetches are
  heartbeats inside the engine, never dropped. A heartbeat event matters to it as one at or after
  the moment a reading shows the fetch became `stall_after_ms` old: it keeps the stall from firing,
  or resolves it. The probe's heartbeats are the same fetches the readings show, so none comes in
  that span; a source whose heartbeats go on while the readings show the broker's fetches stalled
  (an agent whose broker heartbeats its controller but does not fetch) could see the stall resolve
  at a dropped heartbeat unthinned and at the next kept one (at most `max_gap_ms` later) thinned.

Event-time order, not arrival order: with heartbeats of two processes of one broker (a stale
one and its successor) interleaved by a bus's jitter, arrival order showed the stale process's
heartbeats back to back where event time has the successor's between them.
What a chunk cannot see: a heartbeat of the same broker in another chunk of the micro-batch that
falls, in event time, between two kept heartbeats with a different epoch; the next kept one of
the chunk then stands for the dropped ones. Each broker's heartbeats come from its agent in order,
so this takes two processes of one broker, out of order across a chunk boundary.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from itertools import pairwise

from streaming.records.contract import BrokerHeartbeat, Event

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
        heartbeats.sort(key=lambda item: (item[1].ts, item[0]))  # as the engine applies them
        kept = heartbeats[0][1]
        # The first and the last heartbeat of a broker are always kept.
        for (i, hb), (_, following) in pairwise(heartbeats[1:]):
            content = _content(hb)
            if (hb.kind == "heartbeat" and content == _content(kept) == _content(following)
                    and following.ts - kept.ts <= max_gap_ms):
                drop.add(i)
            else:
                kept = hb
    return drop
