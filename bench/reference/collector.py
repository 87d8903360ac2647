"""collector.silent of one collector (README "Collectors: rounds, gaps, leaving"; its `src:<source>`
shard): the clusters whose rounds it stopped sending for longer than a session."""

from __future__ import annotations

from .defaults import SESSION_TIMEOUT
from .incidents import Alerts, Incidents, advance

__all__ = ["Collector"]

RULE = "collector.silent"


class Collector:
    def __init__(self, source: str, alerts: Alerts) -> None:
        self.source = source
        self.inc = Incidents(alerts)
        self.last: dict[tuple[str, str], int] = {}  # (cluster id, target) it observes -> its latest round there
        self.silent: dict[tuple[str, str], int] = {}  # those whose rounds stopped -> since (their last round)

    def subjects(self) -> list[Collector]:
        return [self]

    def deadlines(self) -> list[int]:
        return [last + SESSION_TIMEOUT for observer, last in self.last.items() if observer not in self.silent]

    def on_time(self, now: int) -> None:
        for observer, last in sorted(self.last.items()):
            if observer not in self.silent and last + SESSION_TIMEOUT == now:
                self.silent[observer] = last
        # README: one alert per collector, fired at the first moment, naming what it no longer observes then.
        named = sorted(self.silent.items())
        targets = ", ".join(sorted({target for (_, target), _ in named}))
        self.inc.fire(RULE, self.source, now, f"collector {self.source} has sent no round of {targets} for longer "
                      "than a broker session: their brokers are unobserved (no broker alert can fire for them "
                      "meanwhile)", collector=self.source, since_ms=min(since for _, since in named),
                      clusters=[{"cluster_id": cluster_id, "target": target, "since_ms": since}
                                for (cluster_id, target), since in named])

    def advance(self, now: int) -> None:
        advance(self.deadlines, self.on_time, now, self.inc.alerts)

    def on_round(self, cluster_id: str, target: str, ts: int) -> None:
        self.advance(ts)
        observer = (cluster_id, target)
        self.last[observer] = max(ts, self.last.get(observer, ts))
        if self.silent.pop(observer, None) is not None:
            self.back(ts)

    def drop(self, watched: set[str], ts: int) -> None:
        """It watches exactly `watched` from `ts` on: what it no longer watches, it no longer misses."""
        self.advance(ts)
        dropped = [o for o in self.last if o[1] not in watched]
        for observer in dropped:
            del self.last[observer]
        if [o for o in dropped if self.silent.pop(o, None) is not None]:
            self.back(ts)

    def back(self, ts: int) -> None:
        """README: the alert resolves when every cluster it named has its rounds back. A cluster that went
        silent after it fired (not named) keeps it open too: the collector does not observe it either."""
        if not self.silent:
            self.inc.resolve(RULE, self.source, ts)
