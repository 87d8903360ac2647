"""Operating fleetwatch in production: `check-config` and the spark-submit driver. The top floor:
it imports the stages below, none imports it (`/metrics` is the metrics stage's).

- `check_config`: the `fleetwatch check-config` command (`configure_parser`, `command`).
- `submit.main`: the driver program under spark-submit (deploy/spark/fleetwatch_job.py); an
  entry point, not imported by other stages.
"""

from streaming.ops import check_config

__all__ = ["check_config"]
