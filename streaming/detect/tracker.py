"""What every tracker of a shard is to the engine: a subject's rules, run in event time.

A tracker (`BrokerTracker`, `ClusterTracker`, `TargetTracker`) keeps what its rules know about
one subject and says when a condition changes with no event needed. The engine drives them all
alike between events: it asks each for its `earliest` deadline, fires it with `on_time`, and
before applying an event at `now` brings the event's trackers up to it with `advance_to`. Each
tracker's events have their own handlers (`on_heartbeat`, `on_response`, ...), called by the
engine that knows which events a tracker hears.

`rules` are the settings of the tracker's cluster or target (`RuleBook.for_cluster`,
`RuleBook.for_target`): the engine resolves them, the tracker only reads them.
"""

from __future__ import annotations

from typing import Any, Protocol

from streaming.config import RuleSettings
from streaming.detect.alerts import Emitter, Incidents

__all__ = ["Tracker"]


class Tracker(Protocol):
    @property
    def subject(self) -> str:
        """The subject of the tracker's alerts (an incident is keyed by rule and subject)."""
        ...

    def deadlines(self, rules: RuleSettings, incidents: Incidents) -> list[int]:
        """Moments at which a condition of this subject changes with no event needed."""
        ...

    def earliest(self, rules: RuleSettings, incidents: Incidents) -> float:
        """The earliest of `deadlines` (inf: none): the engine asks it at each wake-up and before it stores
        the shard, so a tracker of many deadlines may keep it while nothing it reads changes."""
        ...

    def on_time(self, now: int, rules: RuleSettings, incidents: Incidents, out: Emitter) -> None:
        """Apply every condition due at `now` (called for each deadline, in time order)."""
        ...

    def advance_to(self, now: int, rules: RuleSettings, incidents: Incidents, out: Emitter) -> None:
        """Fire what fell due strictly before `now`: an event at `now` proves that time passed."""
        ...

    def snapshot(self) -> dict[str, Any]:
        """The subject's row for the state store's tables."""
        ...
