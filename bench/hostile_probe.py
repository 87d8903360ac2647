"""How late a hostile cluster makes the healthy targets' probe rounds (issue 26, point 4).

    PYTHONPATH=. .venv/bin/python bench/hostile_probe.py [--healthy 50 --holes 300 --answer-bytes 1000000
                                                          --rounds 4 --interval-ms 3000 --timeout-ms 2000]

Every server is a Kafka-protocol server on 127.0.0.1 speaking real protocol bytes
(streaming/workshop/hostile_kafka.py), in a process of their own (as remote brokers would be: their
work never competes with the probe's for its interpreter): `--healthy` healthy clusters (one broker each, which
advertises itself), and one hostile cluster whose Metadata answer advertises `--holes` black holes
(listening sockets that never accept) and is padded with topics to `--answer-bytes` (decoding
costs per entry: a maximal answer under the probe's 1 MiB cap).

The live loop (`Prober.run`, as `fleetwatch probe` runs it, with its default limits) runs
`--rounds` ticks twice in the same process: first the healthy clusters alone (the baseline), then
with the hostile one beside them. A healthy target's lateness in a round is when its events were
handed to the sink minus when its tick was due; a round skipped because the target was still busy
counts as missing. Prints p50/p99/max lateness per phase.

Run it against the code before the isolation with PYTHONPATH pointing at that tree's `streaming`
(the bench uses only options both know).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import sys
import time
from typing import Any

from streaming.collect.probe import ProbeOptions, Prober, Target
from streaming.plumbing import clock
from streaming.workshop.hostile_kafka import BlackHoles, HostileKafka


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def phase(targets: list[Target], options: ProbeOptions, rounds: int) -> tuple[list[float], int]:
    """Lateness (ms) of every healthy round, and how many healthy rounds never came."""
    interval_s = options.interval_ms / 1000
    emitted: list[tuple[float, str, int]] = []

    def emit(events: list[dict[str, Any]]) -> None:
        # A round's answers go out as they come; its end (`collector_round`, last) says the round is done.
        for ended in (ev for ev in events if ev["type"] == "collector_round"):
            emitted.append((time.monotonic(), ended["target"], min(ev["ts"] for ev in events)))

    async def run() -> tuple[float, int]:
        started, first_ms = asyncio.get_running_loop().time(), clock.now_ms()
        await Prober(targets, options).run(emit, rounds=rounds)
        return started, first_ms

    started, first_ms = asyncio.run(run())
    lateness, seen = [], 0
    for at, name, ts in emitted:
        if not name.startswith("healthy-"):
            continue
        tick = round((ts - first_ms) / options.interval_ms)
        lateness.append((at - (started + tick * interval_s)) * 1000)
        seen += 1
    healthy = sum(1 for t in targets if t.name.startswith("healthy-"))
    return lateness, healthy * rounds - seen


def serve(pipe: Any, healthy_count: int, hole_count: int, answer_bytes: int) -> None:
    """The servers' process: start them, send their ports, serve until told to stop."""
    healthy = [HostileKafka(f"healthy-{i:02d}").start() for i in range(healthy_count)]
    holes = BlackHoles(hole_count)
    hostile = HostileKafka("hostile", advertised=holes.addresses, answer_bytes=answer_bytes).start()
    pipe.send(([h.port for h in healthy], hostile.port, len(hostile._metadata or b"")))
    try:
        pipe.recv()
    finally:
        hostile.stop()
        holes.close()
        for server in healthy:
            server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--healthy", type=int, default=50)
    parser.add_argument("--holes", type=int, default=300, help="black holes the hostile cluster advertises")
    parser.add_argument("--answer-bytes", type=int, default=1_000_000, help="size of its Metadata answer")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--interval-ms", type=int, default=3000)
    parser.add_argument("--timeout-ms", type=int, default=2000)
    args = parser.parse_args()

    ours, theirs = multiprocessing.Pipe()
    servers = multiprocessing.get_context("spawn").Process(
        target=serve, args=(theirs, args.healthy, args.holes, args.answer_bytes), name="bench-servers", daemon=True)
    servers.start()
    try:
        healthy_ports, hostile_port, answer_size = ours.recv()
        targets = [Target(f"healthy-{i:02d}", (("127.0.0.1", port),)) for i, port in enumerate(healthy_ports)]
        options = ProbeOptions(interval_ms=args.interval_ms, timeout_ms=args.timeout_ms, source="bench")
        print(f"{args.healthy} healthy clusters; hostile: {args.holes} black holes advertised, a "
              f"{answer_size} byte Metadata answer; {args.rounds} rounds every "
              f"{args.interval_ms} ms, timeout {args.timeout_ms} ms, probe defaults otherwise "
              f"(concurrency {options.concurrency})")
        for name, fleet in (("absent", targets), ("present", [Target("hostile", (("127.0.0.1", hostile_port),)),
                                                             *targets])):
            began = time.monotonic()
            lateness, missing = phase(fleet, options, args.rounds)
            print(f"hostile {name:<8} healthy rounds late by p50 {_pct(lateness, 0.5):7.0f} ms, "
                  f"p99 {_pct(lateness, 0.99):7.0f} ms, max {max(lateness, default=float('nan')):7.0f} ms; "
                  f"{len(lateness)} rounds published, {missing} skipped (busy); phase took "
                  f"{time.monotonic() - began:.1f} s")
    finally:
        ours.send("stop")
        servers.join(10)
        if servers.is_alive():
            servers.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
