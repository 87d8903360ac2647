"""The options of the `fleetwatch_kafka` data source (listed in `streaming.source.kafka_reader`),
validated from the strings Spark hands over, and the error the source fails with."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from streaming.plumbing.errors import BusFailure

__all__ = [
    "CLIENT_OPTION",
    "DEFAULT_MAX_RECORDS_PER_BATCH",
    "DEFAULT_TIMEOUT_MS",
    "SHORT_NAME",
    "KafkaReaderOptions",
    "KafkaSourceError",
]

SHORT_NAME = "fleetwatch_kafka"
DEFAULT_MAX_RECORDS_PER_BATCH = 200_000
DEFAULT_TIMEOUT_MS = 60_000
CLIENT_OPTION = "client."


class KafkaSourceError(BusFailure):
    """The Kafka bus could not be read."""


@dataclass(frozen=True)
class KafkaReaderOptions:
    bootstrap_servers: str
    topics: tuple[str, ...]
    starting_offsets: str = "earliest"
    max_records_per_batch: int | None = DEFAULT_MAX_RECORDS_PER_BATCH
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    max_partitions: int | None = None
    min_task_records: int = 0
    # kafka-python security settings (`client.<name>` options: security_protocol, sasl_*, ssl_*),
    # as `streaming.bus.BusAccess` resolved them. Left out of repr: they may hold a password.
    client_settings: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> KafkaReaderOptions:
        """Validate the string options Spark hands to the data source."""
        bootstrap = (options.get("bootstrap_servers") or "").strip()
        topics = tuple(t.strip() for t in (options.get("topics") or "").split(",") if t.strip())
        if not bootstrap:
            raise ValueError(f"{SHORT_NAME}: option bootstrap_servers is required")
        if not topics:
            raise ValueError(f"{SHORT_NAME}: option topics is required (comma separated)")
        starting = (options.get("starting_offsets") or "earliest").strip().lower()
        if starting not in ("earliest", "latest"):
            raise ValueError(f"{SHORT_NAME}: starting_offsets must be earliest or latest, got {starting!r}")
        cap = _int_option(options, "max_records_per_batch", DEFAULT_MAX_RECORDS_PER_BATCH)
        timeout_ms = _int_option(options, "timeout_ms", DEFAULT_TIMEOUT_MS)
        if timeout_ms < 1000:  # kafka-python wants request_timeout_ms > fetch_max_wait_ms (500)
            raise ValueError(f"{SHORT_NAME}: timeout_ms must be >= 1000, got {timeout_ms}")
        max_partitions = _int_option(options, "max_partitions", 0)
        min_task_records = _int_option(options, "min_task_records", 0)
        settings = tuple(sorted((name[len(CLIENT_OPTION):], str(value)) for name, value in options.items()
                                if name.startswith(CLIENT_OPTION)))
        return cls(bootstrap, topics, starting, cap or None, timeout_ms, max_partitions or None, min_task_records,
                   settings)


def _int_option(options: Mapping[str, str], name: str, default: int) -> int:
    raw = options.get(name)
    if raw is None or not str(raw).strip():
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{SHORT_NAME}: option {name} must be an integer, got {raw!r}") from None
    if value < 0:
        raise ValueError(f"{SHORT_NAME}: option {name} must be >= 0, got {value}")
    return value
