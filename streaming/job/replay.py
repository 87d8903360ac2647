"""`fleetwatch replay`: the live job's pipeline over a recorded JSONL file, deterministic.

The coordinator starts, runs and stops it as it does the live job (`streaming.job.coordinator`);
the query over the file is `streaming.job.recorded`'s. The alerts come out in event-time order.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streaming.config import FleetwatchConfig
from streaming.job.coordinator import JobCoordinator
from streaming.job.plans import ReplayPlan
from streaming.job.progress import QueryStats
from streaming.job.recorded import REPLAY_QUERY, Recording
from streaming.sinks import KeyedAlert
from streaming.store import Store

__all__ = ["ReplaySummary", "replay_file"]


@dataclass
class ReplaySummary:
    lines: int
    quarantined: Counter[str]
    firing_by_rule: Counter[str]
    resolved_by_rule: Counter[str]
    seconds: float
    batches: int
    # Detection state left at the end: one row per bucket of shards still remembered, of either pass.
    state_rows: int
    alerts: list[dict[str, Any]] = field(repr=False, default_factory=list)

    def render(self) -> str:
        out = [f"events read: {self.lines} in {self.seconds:.1f} s ({self.batches} micro-batches)",
               f"quarantined: {sum(self.quarantined.values())}"]
        out += [f"  {reason}: {n}" for reason, n in sorted(self.quarantined.items())]
        out.append(f"alerts: {sum(self.firing_by_rule.values())} fired, "
                   f"{sum(self.resolved_by_rule.values())} resolved")
        out += [f"  {rule}: {n} fired, {self.resolved_by_rule.get(rule, 0)} resolved"
                for rule, n in sorted(self.firing_by_rule.items())]
        out.append(f"detection state at the end: {self.state_rows} rows")
        return "\n".join(out)


def replay_file(events_path: str | Path, alerts_out: str | Path | None, config: FleetwatchConfig, *,
                store: Store | None = None, timeout_s: float = 3600.0) -> ReplaySummary:
    """Replay one file; write the alert lines to `alerts_out` (event-time order)."""
    recording = Recording.of(events_path)
    started = time.monotonic()
    collected: list[KeyedAlert] = []
    plan = ReplayPlan(recording, store=store, on_alerts=collected.extend, timeout_s=timeout_s)
    outcome = JobCoordinator(config, plan).run()
    assert outcome.query is not None and outcome.writer is not None  # a replay ends with its query read, or raises
    collected.sort(key=lambda keyed: keyed[0])
    alerts = [alert.to_dict() for _, alert in collected]
    if alerts_out is not None:
        with Path(alerts_out).open("w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(a) + "\n" for a in alerts)
    stats = outcome.query.recorder.stats.get(REPLAY_QUERY, QueryStats())
    second_pass = outcome.writer.second_pass
    return ReplaySummary(
        lines=recording.lines,
        quarantined=outcome.writer.quarantined,
        firing_by_rule=Counter(a["rule"] for a in alerts if a["status"] == "firing"),
        resolved_by_rule=Counter(a["rule"] for a in alerts if a["status"] == "resolved"),
        seconds=time.monotonic() - started,
        batches=stats.batches,
        state_rows=stats.state_rows + (0 if second_pass is None else second_pass.buckets),
        alerts=alerts,
    )
