"""`fleetwatch simulate`: write a simulated stream (and its labels) to files, or produce it live."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import replace

from streaming.collect.simulate.fleet import Simulation
from streaming.collect.simulate.output import produce_live, write_events, write_labels
from streaming.collect.simulate.spec import DEFAULT_START_MS, FleetSpec, parse_faults

__all__ = ["command", "configure_parser"]


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--clusters", type=_positive, default=16, metavar="N",
                   help="clusters in the fleet (default 16)")
    p.add_argument("--brokers", type=_positive, default=3, metavar="M", help="brokers per cluster (default 3)")
    p.add_argument("--faults", default="all", metavar="LIST",
                   help="fault kinds to inject in turn: all, none, or a comma list such as "
                        "heartbeat_lost,misrouted (default all)")
    p.add_argument("--duration", type=_positive, default=600, metavar="SECONDS",
                   help="event time to simulate (default 600)")
    p.add_argument("--seed", type=int, default=0, help="seed for ids and jitter (default 0)")
    p.add_argument("--fault-every", type=_positive, default=60, metavar="SECONDS",
                   help="seconds between fault starts across the fleet (default 60)")
    p.add_argument("--jitter-ms", type=int, default=0, metavar="MS",
                   help="deliver events out of order by up to this many ms, below the 5000 ms "
                        "allowed lateness (default 0: in order)")
    p.add_argument("--out", metavar="EVENTS.jsonl", help="write the events to this JSONL file")
    p.add_argument("--labels", metavar="LABELS.jsonl",
                   help="write the ground truth to this JSONL file: one line per injected fault (kind, "
                        "subject, start, end, the rules it is designed to raise)")
    p.add_argument("--bootstrap", metavar="HOST:PORT",
                   help="produce the events live, in real time, to this Kafka bus")
    p.add_argument("--config", help="config file whose bus.security says how to reach the --bootstrap bus")
    p.add_argument("--start-ms", type=int, default=DEFAULT_START_MS, metavar="EPOCH_MS",
                   help=f"event time of the start, for file output (default {DEFAULT_START_MS}); "
                        "live runs start now")


def _summary(sim: Simulation, counts: Counter[str], labels: int | None) -> str:
    spec = sim.spec
    by_type = ", ".join(f"{kind} {counts[kind]}" for kind in sorted(counts))
    kinds = Counter(f.kind for f in sim.faults)
    faults = ", ".join(f"{kind} x{count}" if count > 1 else kind for kind, count in kinds.items()) or "none"
    line = (f"simulated {spec.clusters} clusters x {spec.brokers} brokers for {spec.duration_ms // 1000} s: "
            f"{sum(counts.values())} events ({by_type or 'none'}); {len(sim.faults)} faults injected ({faults})")
    if sim.skipped:
        line += "; skipped " + ", ".join(f"{k} ({why})" for k, why in sim.skipped.items())
    if labels is not None:
        line += f"; {labels} labels"
    return line


def _progress_printer(duration_ms: int) -> Callable[[int, int], None]:
    def report(events: int, covered_ms: int) -> None:
        print(f"simulate: {covered_ms // 1000}/{duration_ms // 1000} s of event time, {events} events",
              file=sys.stderr, flush=True)
    return report


def command(args: argparse.Namespace) -> int:
    """`fleetwatch simulate`: write a stream (and its labels) to files, or produce it live."""
    def fail(message: str) -> int:
        print(f"fleetwatch simulate: error: {message}", file=sys.stderr)
        return 2

    if not args.out and not args.bootstrap:
        return fail("give --out EVENTS.jsonl to write a file or --bootstrap HOST:PORT to produce live")
    if args.labels and not args.out and not args.bootstrap:
        return fail("--labels needs --out or --bootstrap")
    try:
        spec = FleetSpec(clusters=args.clusters, brokers=args.brokers, faults=parse_faults(args.faults),
                         start_ms=args.start_ms, duration_ms=args.duration * 1000, seed=args.seed,
                         fault_every_ms=args.fault_every * 1000, jitter_ms=args.jitter_ms)
    except ValueError as exc:
        return fail(str(exc))
    sim = Simulation(spec)
    report = _progress_printer(spec.duration_ms)
    if args.bootstrap:
        from kafka.errors import KafkaError

        stop = threading.Event()
        # Ctrl-C or SIGTERM ends the run cleanly: what was sent is flushed and counted below.
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        try:
            from streaming.bus import BusAccess
            from streaming.config import load_config

            security = load_config(args.config).bus.security
            run = produce_live(sim, BusAccess.from_config(args.bootstrap, security), realtime=True,
                               progress=report, stop=stop)
        except KafkaError as exc:
            print(f"fleetwatch simulate: error: cannot produce to {args.bootstrap}: {exc}", file=sys.stderr)
            return 1
        counts = Counter(run.by_type)
        # The stream that went out is the one anchored at the run's start: rebuild it for the
        # files. A stopped run sent only part of it, so there is no file to match it.
        if run.stopped and (args.out or args.labels):
            print("fleetwatch simulate: stopped early; not writing --out/--labels", file=sys.stderr)
            args.out = args.labels = None
        sim = Simulation(replace(spec, start_ms=run.start_ms))
    try:
        if args.out and not args.bootstrap:
            counts = write_events(sim, args.out, progress=report)
        elif args.out:
            write_events(sim, args.out)
        labels = write_labels(sim, args.labels) if args.labels else None
    except OSError as exc:
        print(f"fleetwatch simulate: error: cannot write {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 1
    print(_summary(sim, counts, labels))
    return 130 if args.bootstrap and run.stopped else 0
