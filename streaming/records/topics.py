"""Names of the Kafka topics that make up the telemetry bus (SPEC section 3)."""

from __future__ import annotations

__all__ = ["ALERTS", "ALL", "BROKER_STATES", "HEARTBEATS", "LISTOFFSETS_CHECK", "METADATA", "TELEMETRY"]

METADATA = "fleetwatch.metadata"
BROKER_STATES = "fleetwatch.broker-states"
HEARTBEATS = "fleetwatch.heartbeats"
ALERTS = "fleetwatch.alerts"

# The topics the Spark job reads; ALERTS is written by the job.
TELEMETRY: tuple[str, ...] = (METADATA, BROKER_STATES, HEARTBEATS)
ALL: tuple[str, ...] = (*TELEMETRY, ALERTS)

# Not telemetry: five marker records each time a job process is about to read a configured bus
# with Spark's connector, to find out whether the bus answers ListOffsets(LATEST) with the high
# watermark (streaming/bus/listoffsets.py). Nothing reads them.
LISTOFFSETS_CHECK = "fleetwatch.listoffsets-check"
