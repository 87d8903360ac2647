"""The telemetry bus stage: the embedded broker fleetwatch can start on its own, and the topic
set-up that works against any Kafka bus, and how every client of ours reaches a bus
(`BusAccess`: its addresses and security).

Collectors publish to the bus and the job reads from it; neither needs to know whether the bus
is this embedded Tansu process or a real Kafka cluster.
"""

from streaming.bus.access import BusAccess
from streaming.bus.embedded import (
    BusError,
    EmbeddedBus,
    answers_api_versions,
    ensure_topics,
    free_port,
    tansu_binary,
)

__all__ = [
    "BusAccess",
    "BusError",
    "EmbeddedBus",
    "answers_api_versions",
    "ensure_topics",
    "free_port",
    "tansu_binary",
]
