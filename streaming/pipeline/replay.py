"""`fleetwatch replay`: the live job's pipeline over a recorded JSONL file, deterministic.

The file is read by a streaming source with the same columns as the Kafka readers, so the
same Spark wiring and the same engines run, started and stopped as the live job is
(`streaming.pipeline.run`). The query stops once every line is read and the
batch with the final watermark (largest event time minus the allowed lateness) has run: the
end of the file is not silence, timers fire only once that watermark passes them.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streaming.config import FleetwatchConfig
from streaming.pipeline.run import start_query
from streaming.pipeline.session import spark_session
from streaming.progress import QueryStats
from streaming.sinks import BatchWriter, KeyedAlert
from streaming.source import JsonlFileSource
from streaming.store import Store

__all__ = ["ReplaySummary", "replay_file"]

log = logging.getLogger(__name__)

QUERY_NAME = "fleetwatch_replay"


@dataclass
class ReplaySummary:
    lines: int
    quarantined: Counter[str]
    firing_by_rule: Counter[str]
    resolved_by_rule: Counter[str]
    seconds: float
    batches: int
    state_rows: int  # detection state left at the end: one row per bucket of shards still remembered
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


def _count_lines(path: Path) -> int:
    with path.open("rb") as fh:
        return sum(1 for _ in fh)


def replay_file(events_path: str | Path, alerts_out: str | Path | None, config: FleetwatchConfig, *,
                store: Store | None = None, timeout_s: float = 3600.0) -> ReplaySummary:
    """Replay one file; write the alert lines to `alerts_out` (event-time order)."""
    path = Path(events_path)
    lines = _count_lines(path)
    started = time.monotonic()
    spark = spark_session(config, QUERY_NAME)
    spark.dataSource.register(JsonlFileSource)
    collected: list[KeyedAlert] = []
    writer = BatchWriter(store, on_alerts=collected.extend)
    checkpoint = tempfile.mkdtemp(prefix="fleetwatch-replay-")
    lateness = config.rules.allowed_lateness_ms
    raw = (spark.readStream.format("fleetwatch_jsonl").option("path", str(path))
           .option("lines_per_partition", str(config.spark.max_records_per_batch)).load())
    job = start_query(spark, config, raw, writer, name=QUERY_NAME, checkpoint=checkpoint, trigger="0 seconds",
                      store=store)

    def finished(stats: QueryStats) -> bool:
        if stats.input_rows < lines:
            return False
        if stats.max_event_ms is None:
            return True  # nothing valid to detect on: no timer can be pending
        # The batch after the last data batch runs with the final watermark.
        return not stats.last_batch_rows and (stats.watermark_ms or 0) >= stats.max_event_ms - lateness

    def within_time() -> None:
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"replay did not finish within {timeout_s:.0f} s")

    try:
        if not job.run_until(finished=finished, poll_s=5, on_poll=within_time):
            raise RuntimeError(f"replay query failed: {job.query.exception()}")
    finally:
        job.stop(graceful=False)  # finished, failed or out of time: no batch is worth finishing
        spark.streams.removeListener(job.recorder)
        shutil.rmtree(checkpoint, ignore_errors=True)
    collected.sort(key=lambda keyed: keyed[0])
    alerts = [alert.to_dict() for _, alert in collected]
    if alerts_out is not None:
        with Path(alerts_out).open("w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(a) + "\n" for a in alerts)
    stats = job.recorder.stats.get(QUERY_NAME, QueryStats())
    return ReplaySummary(
        lines=lines,
        quarantined=writer.quarantined,
        firing_by_rule=Counter(a["rule"] for a in alerts if a["status"] == "firing"),
        resolved_by_rule=Counter(a["rule"] for a in alerts if a["status"] == "resolved"),
        seconds=time.monotonic() - started,
        batches=stats.batches,
        state_rows=stats.state_rows,
        alerts=alerts,
    )
