"""The telemetry bus stage: the embedded broker fleetwatch can start on its own, and the topic
set-up that works against any Kafka bus, and how every client of ours reaches a bus
(`BusAccess`: its addresses and security), and whether a bus answers ListOffsets(LATEST) with the
high watermark (`check_list_offsets`: Tansu does not, which decides how the job reads it), and a
producer for many small records that can wait for a flush (`BatchProducer`: the fleet simulator).

Collectors publish to the bus and the job reads from it; neither needs to know whether the bus
is this embedded Tansu process or a real Kafka cluster.
"""

from streaming.bus.access import BusAccess
from streaming.bus.batch_producer import BatchProducer
from streaming.bus.embedded import (
    BusError,
    EmbeddedBus,
    answers_api_versions,
    ensure_topics,
    tansu_binary,
)
from streaming.bus.listoffsets import ListOffsetsCheck, check_list_offsets

__all__ = [
    "BatchProducer",
    "BusAccess",
    "BusError",
    "EmbeddedBus",
    "ListOffsetsCheck",
    "answers_api_versions",
    "check_list_offsets",
    "ensure_topics",
    "tansu_binary",
]
