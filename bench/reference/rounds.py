"""The rounds that reached one cluster (README "Collectors: rounds, gaps, leaving"): who observes it,
up to when, and the gaps nobody watched."""

from __future__ import annotations

from .defaults import SESSION_TIMEOUT

__all__ = ["Rounds"]


class Rounds:
    def __init__(self) -> None:
        self.last: dict[tuple[str, str], int] = {}  # observer (source, target) -> its latest round of the cluster
        self.latest: int | None = None  # the latest round of any observer, past or present

    def until(self) -> int | None:
        """Up to when the cluster is observed; None while it has no observers (then nothing waits)."""
        return self.latest if self.last else None

    def on_round(self, source: str, target: str, ts: int) -> bool:
        """A round of (source, target) at `ts`; True when it ends a gap: more than a session after the
        cluster's last round."""
        gap = self.latest is not None and ts - self.latest > SESSION_TIMEOUT
        self.last[(source, target)] = max(ts, self.last.get((source, target), ts))
        self.latest = ts if self.latest is None else max(self.latest, ts)
        return gap

    def drop(self, source: str, watched: set[str]) -> bool:
        """`source` watches exactly `watched` now: its other targets are no longer observers of the
        cluster. True when that leaves the cluster, which had observers, with none: it is removed.

        README: only "a cluster whose observers were all pairs of that source with targets not listed"
        is removed; a pair dropped from a cluster another observer keeps is dropped too (its collector
        no longer watches it), so a target dropped by every collector in turn is removed at the last."""
        had = bool(self.last)
        for observer in [o for o in self.last if o[0] == source and o[1] not in watched]:
            del self.last[observer]
        return had and not self.last
