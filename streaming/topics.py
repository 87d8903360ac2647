"""Names of the Kafka topics fleetwatch reads and writes."""

__all__ = ["ALERTS", "ALL", "BROKER_STATES", "HEARTBEATS", "METADATA", "TELEMETRY"]

METADATA = "fleetwatch.metadata"
BROKER_STATES = "fleetwatch.broker-states"
HEARTBEATS = "fleetwatch.heartbeats"
ALERTS = "fleetwatch.alerts"
TELEMETRY = (METADATA, BROKER_STATES, HEARTBEATS)
ALL = (*TELEMETRY, ALERTS)
