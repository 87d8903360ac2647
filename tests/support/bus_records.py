"""The records a test produced to a bus, read back: `consume_all`."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from kafka import KafkaConsumer

__all__ = ["consume_all"]


def consume_all(bootstrap: str, topic_names: Iterable[str], expected: int, timeout_s: float = 60) -> list[Any]:
    """Every record of `topic_names` from their beginning, once `expected` of them have arrived (or `timeout_s`)."""
    consumer = KafkaConsumer(*topic_names, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, group_id=None)
    records: list[Any] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(records) < expected and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                records += batch
    finally:
        consumer.close()
    return records
