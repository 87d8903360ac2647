"""Planning: each outbox row the notifier has not seen yet gets one `deliveries` row per receiver
its routes choose (insert-once on (outbox row, receiver), so planning twice is harmless). A firing
that could join a fleet incident waits for it at a receiver that takes incidents (incidents.py). A
resolution goes to every receiver its firing went to, whatever the routes say of `status`, and
to any other its routes choose. A row routed nowhere is done at once; a row that is not an
alert object is a dead letter.

A delivery is scheduled on the notifier's clock: its wait (`group_wait_ms`, an incident's) counts from
when the row was recorded, but never from later than the notifier's now. `created_at` is the clock
of the job's driver that wrote the row, and due-ness is judged on the notifier's: a driver whose
clock runs ahead would otherwise delay every page by its lead (issue 42). A driver behind shortens
the wait by its lag at most: a page may go early, never late."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from streaming.notify.receivers import Receiver
from streaming.notify.routes import Router, group_key
from streaming.records.alert import Alert
from streaming.store import DEAD, NO_RECEIVER, PENDING, DeliveryQueue

__all__ = ["Planner"]

log = logging.getLogger(__name__)

_NOT_AN_ALERT = "the outbox body is not an alert object"


class Planner:
    def __init__(self, queue: DeliveryQueue, router: Router, receivers: Mapping[str, Receiver],
                 group_wait_ms: int, now_ms: Callable[[], int],
                 incident_wait_ms: Callable[[Alert], int] = lambda alert: 0) -> None:
        self.queue = queue
        self.incident_wait_ms = incident_wait_ms
        self.router = router
        self.receivers = receivers
        self.group_wait_ms = group_wait_ms
        self.now_ms = now_ms

    def plan(self, limit: int = 1000) -> int:
        """Create the deliveries of outbox rows not planned yet; returns how many were created."""
        created = 0
        while True:
            now = self.now_ms()
            rows, firing_went = self.queue.unplanned(limit)
            if not rows:
                return created
            planned: list[dict[str, Any]] = []
            unrouted: list[int] = []
            broken: list[int] = []
            for row in rows:
                base = {"outbox_id": row.id, "alert_id": row.alert_id, "status": row.status,
                        "subject": row.subject, "attempts": 0, "dead_letter": False, "created_at": now}
                alert = row.alert  # its body, read once by the queue
                if not isinstance(alert, Alert):
                    broken.append(row.id)
                    planned.append({**base, "receiver": NO_RECEIVER, "rule": "", "group_key": "", "state": DEAD,
                                    "dead_letter": True, "next_attempt_at": now, "last_error": _NOT_AN_ALERT})
                    continue
                names = self.receivers_for(alert, firing_went)
                if row.status != "resolved":
                    firing_went[row.alert_id] = names  # its resolution may be in this same batch
                if not names:
                    unrouted.append(row.id)
                held = self.incident_wait_ms(alert) if names else 0
                recorded = min(row.created_at, now)  # never in the notifier's future (the docstring)
                for name in names:
                    wait = self.group_wait_ms if self.receivers[name].accepts_groups else 0
                    wait = max(wait, held if self.receivers[name].accepts_incidents else 0)
                    planned.append({**base, "receiver": name, "rule": alert.rule, "group_key": group_key(alert),
                                    "state": PENDING, "next_attempt_at": recorded + wait, "last_error": None})
            self.queue.save_plan(planned, unrouted, broken, now, f"dead letter: {_NOT_AN_ALERT}")
            created += len(planned)
            if broken:
                log.error("outbox rows that are not alert objects", extra={"outbox_ids": broken})
            if len(rows) < limit:
                return created

    def receivers_for(self, alert: Alert, firing_went: Mapping[str, list[str]]) -> list[str]:
        """The routes' receivers; for a resolution, first every receiver its firing went to (routes
        matching `status: [firing]` included: what paged must be told it resolved). A firing never
        planned is routed as the routes would route it now."""
        chosen = self.router.receivers_for(alert)
        if alert.status != "resolved":
            return chosen
        went = firing_went.get(alert.alert_id)
        if went is None:
            went = self.router.receivers_for(replace(alert, status="firing"))
        return [name for name in dict.fromkeys([*went, *chosen]) if name in self.receivers]
