"""Where the job's output goes, from Spark's `foreachBatch`: the store first, then the alerts topic.

- `BatchWriter(store, on_alerts=, stop=, retention=, checkpoint=, orphaned_since=, second_pass=)`:
  the foreachBatch callable; it runs detection's second pass over a micro-batch's rows
  (streaming.detect.SecondPass), writes them to the store in one transaction with that pass's
  state (its quarantine bounded: quarantine_rows.py), then hands its alerts, as `KeyedAlert`s in
  event-time order, to `on_alerts`.
- `AlertPublisher(bus)`: an `on_alerts` that publishes them to the alerts topic (best effort;
  `PublishFailed` says how many were not).

What the job's output rows hold, and how each kind is spelled, is streaming/records/job_output.py: the
pipeline writes them, the writer reads them back (`BatchOutput.of`).

Names are loaded on first use: a caller that needs the writer does not load the bus client with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streaming.plumbing.lazy_names import load_on_first_use

if TYPE_CHECKING:
    from streaming.sinks.alerts_topic import AlertPublisher, PublishFailed
    from streaming.sinks.batch_writer import RESET_REASON, BatchWriter, KeyedAlert

__all__ = ["RESET_REASON", "AlertPublisher", "BatchWriter", "KeyedAlert", "PublishFailed"]

_HOME = {
    **dict.fromkeys(("AlertPublisher", "PublishFailed"), "alerts_topic"),
    **dict.fromkeys(("RESET_REASON", "BatchWriter", "KeyedAlert"), "batch_writer"),
}

__getattr__ = load_on_first_use(__name__, _HOME)
