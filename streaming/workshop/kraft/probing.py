"""`fleetwatch probe` in a background thread: real clusters -> the telemetry bus, until stopped.

The real-Kafka tests, `bench/real_faults.py` and the demo watch local clusters with it, exactly
as the `probe` command would (same `Prober`, same `BusPublisher`).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

from streaming.collect.probe import BusPublisher, ProbeOptions, Prober, Target, parse_address

__all__ = ["BackgroundProbe", "target_of"]


def target_of(name: str, bootstrap: Sequence[str], expected_cluster_id: str | None = None) -> Target:
    """A probe target for a cluster on loopback (no TLS, no SASL), pinned to `expected_cluster_id`
    as `clusters[].expected_cluster_id` would pin it."""
    return Target(name=name, bootstrap=tuple(parse_address(a) for a in bootstrap),
                  expected_cluster_id=expected_cluster_id)


class BackgroundProbe:
    """Probes `targets` every `options.interval_ms` and publishes the events to the bus."""

    def __init__(self, targets: Sequence[Target], bootstrap_servers: str, options: ProbeOptions,
                 partitions: int = 1) -> None:
        self.prober = Prober(targets, options)
        self._publisher = BusPublisher(bootstrap_servers, partitions)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="background-probe", daemon=True)

    def start(self) -> BackgroundProbe:
        self._thread.start()
        self._ready.wait(timeout=10)
        return self

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            self._ready.set()
            await self.prober.run(self._publisher, stop=self._stop)

        asyncio.run(main())

    def stop(self) -> None:
        """Finish the round in flight, flush what was published, and stop."""
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=30)
        self._publisher.close()

    def __enter__(self) -> BackgroundProbe:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
