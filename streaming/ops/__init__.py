"""Operating fleetwatch in production: `/metrics` for Prometheus, `check-config`, the spark-submit driver.

- `check_config`: the `fleetwatch check-config` command (`configure_parser`, `command`).
- `/metrics`: `add_metrics_arguments(parser)` for the commands that serve it,
  `start_metrics_server(store, port, host)`, and `increment(counter)`
  for the counters the job keeps in its process.
- `submit.main`: the driver program under spark-submit (deploy/spark/fleetwatch_job.py); an
  entry point, not imported by other stages.
"""

from streaming.ops import check_config
from streaming.ops.metrics import MetricsServer, increment, start_metrics_server
from streaming.ops.metrics_access import add_metrics_arguments

__all__ = ["MetricsServer", "add_metrics_arguments", "check_config", "increment",
           "start_metrics_server"]
