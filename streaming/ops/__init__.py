"""Operating fleetwatch in production: `check-config`, `alerts`, `export`, `replay --what-if` and the
spark-submit driver. The top floor: it imports the stages below, none imports it (`/metrics` is the
metrics stage's).

- `alert_commands`: `fleetwatch alerts list|resolve` (an alert's id; a stuck alert resolved by hand).
- `check_config`: the `fleetwatch check-config` command (`configure_parser`, `command`).
- `whatif`: `fleetwatch replay --what-if` (two replays compared, a Markdown report).
- `export`: `fleetwatch export` (a time range of the bus's telemetry as a replayable file), sorted by
  event time through `spill` (runs on disk, merged) whatever its size.
- `submit.main`: the driver program under spark-submit (deploy/spark/fleetwatch_job.py); an
  entry point, not imported by other stages.
"""

from streaming.ops import alert_commands, check_config, export, whatif

__all__ = ["alert_commands", "check_config", "export", "whatif"]
