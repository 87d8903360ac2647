"""Where the job's output goes, from Spark's `foreachBatch`: the store first, then the alerts topic.

- `BatchWriter(store, on_alerts=, stop=, retention=, checkpoint=, orphaned_since=)`: the
  foreachBatch callable; it writes a micro-batch's rows to the store in one transaction (its
  quarantine bounded: quarantine_rows.py), then hands its alerts, as `KeyedAlert`s in event-time
  order, to `on_alerts`.
- `AlertPublisher(bus)`: an `on_alerts` that publishes them to the alerts topic (best effort;
  `PublishFailed` says how many were not).
- `StateRow`: a broker, cluster or target snapshot, from the pipeline's stateful stage (its
  output row, `StateRow.output`) to the writer, which keeps the latest of each key.
- `compact_json(obj)`: the text of `json.dumps(obj, separators=(",", ":"))`, cheaper: the
  payloads of output rows.

Names are loaded on first use: the pipeline's stateful stage imports `StateRow` through this door
in Spark's Python processes, and must not load the store and the bus client with it (Spark starts
a fresh interpreter per stateful operator at every query start to read its state schema: the
writer's imports were 0.6 s of each one's 2.5 s).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streaming.lazy_names import load_on_first_use

if TYPE_CHECKING:
    from streaming.sinks.alerts_topic import AlertPublisher, PublishFailed
    from streaming.sinks.batch_writer import RESET_REASON, BatchWriter, KeyedAlert
    from streaming.sinks.state_rows import StateRow, compact_json

__all__ = ["RESET_REASON", "AlertPublisher", "BatchWriter", "KeyedAlert", "PublishFailed", "StateRow", "compact_json"]

_HOME = {
    **dict.fromkeys(("AlertPublisher", "PublishFailed"), "alerts_topic"),
    **dict.fromkeys(("RESET_REASON", "BatchWriter", "KeyedAlert"), "batch_writer"),
    **dict.fromkeys(("StateRow", "compact_json"), "state_rows"),
}

__getattr__ = load_on_first_use(__name__, _HOME)
