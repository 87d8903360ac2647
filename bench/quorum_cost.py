"""What the fast quorum reading (issue 44; streaming/collect/probe/quorum.py) costs, per cluster and for
1,000 clusters: requests, bytes on the wire and on the bus, and the probe's CPU, per second.

    .venv/bin/python bench/quorum_cost.py [--targets 200] [--seconds 30] [--json]

One real Apache Kafka 4.4 cluster (3 controllers, 3 brokers) and one probe process whose `--targets`
targets all read it (each its own connection, kept open, as `fleetwatch probe` reads that many clusters),
a reading of each every second for `--seconds`. Measured over that window: the readings made, the
requests sent (DescribeQuorum and DescribeCluster per reading), the bytes read and written on the
connections (answers and requests, size prefixes included), the bytes of the `quorum_reading` events (what
goes on the bus), and the probe process's CPU time (user + system). Printed per reading and scaled to
1,000 clusters a second (linear: each cluster is a connection and two requests a second, nothing shared
but the event loop; the run checks that the readings kept their one-second cadence). A 3-broker cluster's
answers: a cluster of 12 brokers adds about 40 bytes per broker to each answer and 15 to each event.

And the detection's side: the engines the Spark job runs (`streaming.detect.detect`, pure Python, no Spark)
over a simulated fleet of `--sim-clusters` clusters of 3 brokers for 60 s, with the simulated probe's
readings (and the rounds it then says) and without: the events and the engines' CPU time, per reading.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from streaming.collect.probe import ProbeOptions, Prober
from streaming.collect.protocol import Connection, encode_request
from streaming.collect.simulate import DEFAULT_START_MS, FleetSpec, Simulation
from streaming.detect import detect
from streaming.records.contract import event_from_dict
from streaming.workshop.kraft import KRaftCluster, target_of

CLUSTERS = 1000


class CountingConnection(Connection):
    """The probe's connection, counting what it writes (it counts what it reads itself)."""

    written = 0
    read = 0

    async def call(self, api: str, version: int, values: Any = None) -> dict[str, Any]:
        CountingConnection.written += len(encode_request(f"{api}Request", version, 0, self.client_id, values))
        before = self.bytes_read
        try:
            return await super().call(api, version, values)
        finally:
            CountingConnection.read += self.bytes_read - before


async def _measure(prober: Prober, seconds: float) -> dict[str, Any]:
    """`fleetwatch probe`'s live loop with one round at its start (the next one is an hour away): the
    readings alone over the window, once each target's reading connection is open."""
    events: list[dict[str, Any]] = []
    stop = asyncio.Event()
    probe = asyncio.create_task(prober.run(events.extend, stop=stop))
    while prober.quorum.readings < len(prober.targets) and not probe.done():
        await asyncio.sleep(0.1)  # the first round, then a first reading of each target
    await asyncio.sleep(2)
    events.clear()
    CountingConnection.written = CountingConnection.read = 0
    cpu, wall = time.process_time(), time.monotonic()
    await asyncio.sleep(seconds)
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    counted = {"events": [e for e in events if e["type"] == "quorum_reading"],
               "written": CountingConnection.written, "read": CountingConnection.read}
    stop.set()
    await probe
    return {"cpu_s": cpu, "wall_s": wall, **counted}


def engine_cost(clusters: int) -> dict[str, float]:
    """The engines' CPU time over a simulated fleet's minute, with the probe's readings and without."""
    out: dict[str, float] = {}
    for name, interval in (("with", 1000), ("without", 0)):
        spec = FleetSpec(clusters=clusters, brokers=3, faults=(), start_ms=DEFAULT_START_MS, duration_ms=60_000,
                         quorum_interval_ms=interval)
        events = [event_from_dict(e) for _, e in Simulation(spec).events()]
        cpu = time.process_time()
        detect(events)
        out[f"{name}_cpu_s"], out[f"{name}_events"] = time.process_time() - cpu, len(events)
        out[f"{name}_readings"] = sum(e.type == "quorum_reading" for e in events)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--targets", type=int, default=200, help="targets reading the cluster (default 200)")
    parser.add_argument("--seconds", type=float, default=30, help="the measured window (default 30)")
    parser.add_argument("--sim-clusters", type=int, default=200, help="the simulated fleet's clusters (default 200)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="fleetwatch-quorum-cost-"))
    load = os.getloadavg()[0]
    with KRaftCluster(workdir / "cluster", brokers=3, controllers=3, session_timeout_ms=9000,
                      heartbeat_interval_ms=2000) as cluster:
        targets = [target_of(f"t{i:04d}", cluster.bootstrap) for i in range(args.targets)]
        prober = Prober(targets, ProbeOptions(source="quorum-cost", concurrency=max(256, args.targets),
                                              interval_ms=3_600_000, quorum_interval_ms=1000),
                        connection=CountingConnection)
        got = asyncio.run(_measure(prober, args.seconds))
    engines = engine_cost(args.sim_clusters)
    readings = len(got["events"])
    per = {"requests": 2, "bytes_written": got["written"] / readings, "bytes_read": got["read"] / readings,
           "event_bytes": sum(len(orjson.dumps(e)) for e in got["events"]) / readings,
           "cpu_ms": got["cpu_s"] * 1000 / readings}
    cadence = readings / (args.targets * got["wall_s"])
    scaled = {"readings": CLUSTERS, "requests": CLUSTERS * per["requests"],
              "wire_bytes": CLUSTERS * (per["bytes_written"] + per["bytes_read"]),
              "bus_bytes": CLUSTERS * per["event_bytes"], "cpu_s": CLUSTERS * per["cpu_ms"] / 1000}
    summary = {"targets": args.targets, "seconds": round(got["wall_s"], 1), "readings": readings,
               "readings_per_target_per_s": round(cadence, 3), "load_average": load,
               "per_reading": {k: round(v, 3) for k, v in per.items()},
               "per_second_for_1000_clusters": {k: round(v, 3) for k, v in scaled.items()},
               "engines": {k: round(v, 3) for k, v in engines.items()}}
    if args.json:
        print(json.dumps(summary))
        return 0
    print(f"{args.targets} targets reading one real Kafka 4.4 cluster (3 controllers, 3 brokers) every second "
          f"for {got['wall_s']:.0f} s: {readings} readings ({cadence:.2f} a target a second); load average "
          f"{load:.1f} (2 cores)")
    print(f"per reading: {per['requests']} requests, {per['bytes_written']:.0f} bytes written, {per['bytes_read']:.0f} "
          f"read, a {per['event_bytes']:.0f}-byte event, {per['cpu_ms']:.3f} ms of the probe's CPU")
    print(f"for {CLUSTERS:,} clusters, a second: {scaled['requests']:,.0f} requests, "
          f"{scaled['wire_bytes'] / 1024:,.0f} KiB on the wire, {scaled['bus_bytes'] / 1024:,.0f} KiB on the bus "
          f"({CLUSTERS:,} events), {scaled['cpu_s']:.2f} s of CPU ({scaled['cpu_s'] * 100:.0f}% of a core)")
    extra = engines["with_cpu_s"] - engines["without_cpu_s"]
    per_reading_ms = extra * 1000 / max(1, engines["with_readings"])
    print(f"detection ({args.sim_clusters} simulated clusters x 3 brokers, 60 s, the engines without Spark): "
          f"{engines['without_events']:,.0f} events in {engines['without_cpu_s']:.2f} s of CPU without readings, "
          f"{engines['with_events']:,.0f} ({engines['with_readings']:,.0f} readings) in {engines['with_cpu_s']:.2f} s "
          f"with them: {per_reading_ms:.3f} ms a reading, {CLUSTERS * per_reading_ms / 1000:.2f} s of CPU a second "
          f"for {CLUSTERS:,} clusters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
