"""Probe-round latency with dead clusters in the fleet: one round must take no longer than the
per-exchange timeout plus a small margin, however many targets do not answer.

    .venv/bin/python bench/probe_round.py [--targets 200 --dead 20 --timeout-ms 3000 --rounds 3]

Healthy targets are spread over a few real Tansu brokers on 127.0.0.1; half of the dead ones
are blackholes (a listening socket that never accepts, so TCP connects and then nothing comes
back: each costs the full timeout), the other half refused ports. Each round is run twice:
`probe_round` (the whole round, as `--once` does) and the live loop (`Prober.run`), where each
answer is published as its exchange ends and a target's round end (`collector_round`) as soon as
that target is done; for the live loop the bench reports when the last healthy target's round
ended. Exit status 1 if a round exceeds timeout + margin.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import sys
import time
from typing import Any

from streaming.bus import EmbeddedBus
from streaming.collect.probe import ProbeOptions, Prober, Target
from streaming.plumbing.ports import free_port


def _blackhole() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(4096)
    return sock


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", type=int, default=200)
    parser.add_argument("--dead", type=int, default=20, help="targets that do not answer (half blackholes)")
    parser.add_argument("--brokers", type=int, default=4, help="Tansu brokers behind the healthy targets")
    parser.add_argument("--timeout-ms", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--margin-ms", type=int, default=500, help="allowed over the timeout (default 500)")
    args = parser.parse_args()

    buses = [EmbeddedBus(topics=()).start() for _ in range(args.brokers)]
    holes = [_blackhole() for _ in range(args.dead - args.dead // 2)]
    refused = [free_port() for _ in range(args.dead // 2)]
    try:
        dead_addresses = [f"127.0.0.1:{h.getsockname()[1]}" for h in holes] + [f"127.0.0.1:{p}" for p in refused]
        targets = []
        for i in range(args.targets - args.dead):
            host, port = buses[i % len(buses)].bootstrap.split(":")
            targets.append(Target(f"healthy-{i:03d}", ((host, int(port)),)))
        for i, address in enumerate(dead_addresses):
            host, port = address.split(":")
            targets.append(Target(f"dead-{i:02d}", ((host, int(port)),)))
        options = ProbeOptions(timeout_ms=args.timeout_ms, concurrency=args.concurrency, source="bench")
        timeout_s, margin_s = args.timeout_ms / 1000, args.margin_ms / 1000
        print(f"{len(targets)} targets: {args.targets - args.dead} healthy on {args.brokers} Tansu brokers, "
              f"{len(holes)} blackholes, {len(refused)} refused ports; timeout {args.timeout_ms} ms, "
              f"concurrency {args.concurrency}")

        worst = 0.0
        prober = Prober(targets, options)
        for r in range(args.rounds):
            started = time.monotonic()
            events = prober.probe_round()
            took = time.monotonic() - started
            worst = max(worst, took)
            responses = [ev for ev in events if ev["type"] == "metadata_response"]
            ok = [ev["latency_ms"] for ev in responses if ev["error"] is None]
            errors: dict[str, int] = {}
            for ev in responses:
                if ev["error"] is not None:
                    errors[ev["error"]] = errors.get(ev["error"], 0) + 1
            serial = sum(ev["latency_ms"] for ev in responses) / 1000
            print(f"round {r + 1} (probe_round): {took:.3f} s = {took / timeout_s:.3f} x timeout; "
                  f"{len(responses)} exchanges, ok {len(ok)} (latency p50 {statistics.median(ok):.0f} ms, "
                  f"p99 {_pct(ok, 0.99):.0f} ms), errors {errors}; sum of exchange times {serial:.1f} s")

        live = Prober(targets, options)
        published: dict[str, float] = {}

        def emit(events: list[dict[str, Any]]) -> None:
            for ended in (ev for ev in events if ev["type"] == "collector_round"):  # a target's round is done
                published[ended["target"]] = time.monotonic() - started

        for r in range(args.rounds):
            started = time.monotonic()
            asyncio.run(live.run(emit, rounds=1))
            took = time.monotonic() - started
            worst = max(worst, took)
            healthy_done = max(t for name, t in published.items() if name.startswith("healthy"))
            dead_done = max(t for name, t in published.items() if name.startswith("dead"))
            print(f"round {r + 1} (live loop):   {took:.3f} s = {took / timeout_s:.3f} x timeout; last healthy "
                  f"target published after {healthy_done:.3f} s, last dead one after {dead_done:.3f} s")
    finally:
        for hole in holes:
            hole.close()
        for bus in buses:
            bus.stop()

    verdict = "OK" if worst <= timeout_s + margin_s else "TOO SLOW"
    print(f"worst round {worst:.3f} s, timeout {timeout_s:.3f} s, ratio {worst / timeout_s:.3f} "
          f"(limit {(timeout_s + margin_s) / timeout_s:.3f}): {verdict}")
    return 0 if verdict == "OK" else 1


if __name__ == "__main__":
    sys.exit(main())
