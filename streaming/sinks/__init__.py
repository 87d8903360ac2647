"""Where the job's output goes, from Spark's `foreachBatch`: the store first, then the alerts topic.

- `BatchWriter(store, on_alerts=, stop=, retention=, checkpoint=, orphaned_since=)`: the
  foreachBatch callable; it writes a micro-batch's rows to the store in one transaction, then
  hands its alerts, as `KeyedAlert`s in event-time order, to `on_alerts`.
- `AlertPublisher(bus)`: an `on_alerts` that publishes them to the alerts topic (best effort;
  `PublishFailed` says how many were not).
"""

from streaming.sinks.alerts_topic import AlertPublisher, PublishFailed
from streaming.sinks.batch_writer import RESET_REASON, BatchWriter, KeyedAlert

__all__ = ["RESET_REASON", "AlertPublisher", "BatchWriter", "KeyedAlert", "PublishFailed"]
