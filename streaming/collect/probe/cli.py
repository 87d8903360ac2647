"""`fleetwatch probe`: poll the configured clusters, publish (or write) what they answer."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from streaming.collect.probe.prober import EventSink, Prober
from streaming.collect.probe.publish import BusPublisher, JsonlWriter
from streaming.collect.probe.targets import LayoutLimits, ProbeOptions, default_source, targets_from_config
from streaming.config import ConfigError, load_config

__all__ = ["command", "configure_parser"]

log = logging.getLogger(__name__)


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="config file with the clusters to probe")
    p.add_argument("--once", action="store_true", help="probe every target once, then exit")
    p.add_argument("--rounds", type=_positive, metavar="N", help="stop after N rounds (default: run until Ctrl-C)")
    p.add_argument("--out", metavar="EVENTS.jsonl",
                   help="write the events to this JSONL file instead of publishing them to the bus")
    p.add_argument("--bootstrap-servers", metavar="HOST:PORT",
                   help="the telemetry bus to publish to (default: bus.bootstrap_servers of the config)")
    p.add_argument("--interval-ms", type=_positive, default=5000, help="time between rounds (default 5000)")
    p.add_argument("--timeout-ms", type=_positive, default=3000,
                   help="limit for one exchange with one address: connect, TLS, SASL, requests (default 3000)")
    p.add_argument("--concurrency", type=_positive, default=256,
                   help="connections in flight at once over all targets (default 256); one target takes at "
                        "most probe.target_concurrency of them (config, default 32)")
    p.add_argument("--target", action="append", metavar="NAME",
                   help="probe only this configured cluster (repeatable)")
    p.add_argument("--source", default=None,
                   help="collector id in the events (default probe-<hostname>); keep it the same across restarts "
                        "and rollouts of one probe, and distinct between the probes of an HA pair")
    p.add_argument("--ready-file", metavar="PATH",
                   help="create this file once a first round is published (a readiness check: a rollout "
                        "that waits for it leaves no gap in the rounds)")


def command(args: argparse.Namespace) -> int:
    """`fleetwatch probe`: poll the configured clusters, publish (or write) what they answer."""
    config = load_config(args.config)
    if args.timeout_ms >= args.interval_ms:
        raise ConfigError(f"--timeout-ms ({args.timeout_ms}) must be below --interval-ms ({args.interval_ms})")
    targets = targets_from_config(config, only=args.target)
    if not targets:
        raise ConfigError(f"{args.config}: no clusters to probe (clusters: is empty)")
    limits = config.probe
    if args.concurrency < limits.target_concurrency:
        raise ConfigError(f"--concurrency ({args.concurrency}) must be at least probe.target_concurrency "
                          f"({limits.target_concurrency}) of {args.config}")
    options = ProbeOptions(interval_ms=args.interval_ms, timeout_ms=args.timeout_ms,
                           concurrency=args.concurrency, source=args.source or default_source(),
                           target_concurrency=limits.target_concurrency,
                           max_endpoints=limits.max_endpoints_per_target,
                           max_response_bytes=limits.max_response_bytes,
                           layout=LayoutLimits(limits.layout_interval_ms, limits.layout_max_bytes,
                                               limits.layout_timeout_ms),
                           quorum_interval_ms=limits.quorum_interval_ms)
    rounds = 1 if args.once else args.rounds
    sink: JsonlWriter | BusPublisher | _ReadyOnFirst
    if args.out:
        sink, where = JsonlWriter(args.out), args.out
    else:
        bus = args.bootstrap_servers or config.bus.bootstrap_servers
        if bus is None:
            raise ConfigError("no bus to publish to: set bus.bootstrap_servers in the config, "
                              "pass --bootstrap-servers, or write to a file with --out")
        from streaming.bus import BusAccess

        # A bus that cannot be reached (BusError) goes on to the CLI: one line, exit 4.
        sink = BusPublisher(BusAccess.from_config(bus, config.bus.security), config.bus.partitions)
        where = bus
    if args.ready_file:
        sink = _ReadyOnFirst(sink, Path(args.ready_file))
    prober = Prober(targets, options)
    log.info("probe started", extra={"targets": len(targets), "interval_ms": options.interval_ms,
                                     "timeout_ms": options.timeout_ms, "quorum_interval_ms": options.quorum_interval_ms,
                                     "to": where})
    try:
        asyncio.run(_run_until_signalled(prober, sink, rounds))
    finally:
        sink.close()
    failing = prober.failing_targets()
    print(f"fleetwatch probe: {prober.rounds} round(s) over {len(targets)} target(s), "
          f"{prober.events_emitted} events to {where}; failing now: {', '.join(failing) or 'none'}",
          file=sys.stderr)
    return 0


class _ReadyOnFirst:
    """A sink that creates `ready` once a first round went out (and removes it at the end)."""

    def __init__(self, sink: JsonlWriter | BusPublisher, ready: Path) -> None:
        self.sink, self.ready = sink, ready
        ready.unlink(missing_ok=True)

    def __call__(self, events: list[dict[str, Any]]) -> None:
        self.sink(events)
        if not self.ready.exists() and any(ev["type"] == "collector_round" for ev in events):
            self.ready.touch()

    def close(self) -> None:
        self.ready.unlink(missing_ok=True)
        self.sink.close()


async def _run_until_signalled(prober: Prober, sink: EventSink, rounds: int | None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await prober.run(sink, stop=stop, rounds=rounds)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)

