"""The simulated stream to files (JSONL events, and the injected faults as labels) or, live, to a
Kafka bus."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson
from kafka.partitioner.default import murmur2

from streaming.bus import BatchProducer, BusAccess
from streaming.collect.simulate.fleet import Simulation
from streaming.plumbing.clock import now_ms

__all__ = ["LiveRun", "produce_live", "write_events", "write_labels"]

_PROGRESS_EVERY_S = 3.0
_EARLY_S = 0.01  # how early a real-time event may be sent
_LINGER_S = 0.05  # how long a real-time event may wait for the next flush


@dataclass(frozen=True)
class LiveRun:
    """What `produce_live` did; `start_ms` rebuilds the exact stream it produced."""

    sent: int
    start_ms: int
    stopped: bool
    by_type: dict[str, int] = field(default_factory=dict)


def _line(obj: dict[str, Any]) -> bytes:
    # orjson writes what json.dumps(obj, separators=(",", ":")) does for the simulator's ASCII
    # values, at a fraction of the cost (most of write_events' time was json.dumps).
    return orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE)


def write_events(sim: Simulation, path: str | Path, *,
                 progress: Callable[[int, int], None] | None = None) -> Counter[str]:
    """Write the stream as JSONL; returns the count of events by type. `progress` gets
    (events written, event time covered in ms) every few seconds."""
    counts: Counter[str] = Counter()
    written, last_report = 0, time.monotonic()
    with open(path, "wb") as fh:
        for _, ev in sim.events():
            fh.write(_line(ev))
            counts[ev["type"]] += 1
            written += 1
            if progress is not None and written % 10_000 == 0 and time.monotonic() - last_report >= _PROGRESS_EVERY_S:
                last_report = time.monotonic()
                progress(written, ev["ts"] - sim.spec.start_ms)
    return counts


def write_labels(sim: Simulation, path: str | Path) -> int:
    """Write the injected faults as JSONL label lines (`InjectedFault.as_dict`); returns how many."""
    labels = sim.labels()
    with open(path, "wb") as fh:
        for label in labels:
            fh.write(_line(label))
    return len(labels)


def produce_live(sim: Simulation, bus: str | BusAccess, *, realtime: bool = True,
                 progress: Callable[[int, int], None] | None = None,
                 stop: threading.Event | None = None) -> LiveRun:
    """Produce the stream to Kafka, each event to its topic, keyed by cluster id.

    In real time the stream is re-anchored to start now and each event is sent when the wall
    clock reaches it (up to `_EARLY_S` early); otherwise events keep their times and go as fast
    as the producer takes them. `stop` interrupts the run; `progress` gets (events sent, event
    time covered in ms) every few seconds. Sent events are flushed before returning.
    """
    run = Simulation(replace(sim.spec, start_ms=now_ms())) if realtime else sim
    stop = stop or threading.Event()
    by_type: Counter[str] = Counter()
    sent, last_report = 0, time.monotonic()
    # Kafka's keyed partitioning (murmur2, in pure Python here) would run once per message; its
    # answer only depends on (topic, key), so it runs once per cluster and topic.
    partition_of: dict[tuple[str, bytes], int] = {}
    with BatchProducer(bus, client_id="fleetwatch-simulate") as producer:
        flushed = time.monotonic()
        for due, topic, ev in run.emission():
            # Sleeping for each millisecond's events cost more CPU than producing them: wait only
            # when the next event is more than _EARLY_S ahead of the wall clock. What waits is sent
            # first when the wait is long or the last flush _LINGER_S ago.
            if realtime and (wait_s := (due - now_ms()) / 1000) > _EARLY_S:
                if wait_s >= _LINGER_S or time.monotonic() - flushed >= _LINGER_S:
                    producer.flush()
                    flushed = time.monotonic()
                if stop.wait(wait_s):
                    break
            if stop.is_set():
                break
            key = (ev["cluster_id"] or "").encode()
            partition = partition_of.get((topic, key))
            if partition is None:
                partitions = producer.partitions_for(topic)
                partition = partitions[(murmur2(key) & 0x7FFFFFFF) % len(partitions)]
                partition_of[(topic, key)] = partition
            producer.add(topic, partition, key, orjson.dumps(ev))
            sent += 1
            by_type[ev["type"]] += 1
            if progress is not None and time.monotonic() - last_report >= _PROGRESS_EVERY_S:
                last_report = time.monotonic()
                progress(sent, ev["ts"] - run.spec.start_ms)
    return LiveRun(sent=sent, start_ms=run.spec.start_ms, stopped=stop.is_set(), by_type=dict(by_type))
