"""Where the job's output goes, from Spark's `foreachBatch`: the store first, then the alerts topic.

- `BatchWriter(store, on_alerts=, stop=, retention=, checkpoint=, orphaned_since=)`: the
  foreachBatch callable; it writes a micro-batch's rows to the store in one transaction, then
  hands its alerts, as `KeyedAlert`s in event-time order, to `on_alerts`.
- `AlertPublisher(bus)`: an `on_alerts` that publishes them to the alerts topic (best effort;
  `PublishFailed` says how many were not).
- `StateRow`: a broker, cluster or target snapshot, from the pipeline's stateful stage (its
  output row, `StateRow.output`) to the writer, which keeps the latest of each key.
- `compact_json(obj)`: the text of `json.dumps(obj, separators=(",", ":"))`, cheaper: the
  payloads of output rows.
"""

from streaming.sinks.alerts_topic import AlertPublisher, PublishFailed
from streaming.sinks.batch_writer import RESET_REASON, BatchWriter, KeyedAlert
from streaming.sinks.state_rows import StateRow, compact_json

__all__ = ["RESET_REASON", "AlertPublisher", "BatchWriter", "KeyedAlert", "PublishFailed", "StateRow", "compact_json"]
