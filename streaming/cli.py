"""The `fleetwatch` command line. An error of fleetwatch that reaches it is one line on stderr and
the exit code of its kind (streaming/plumbing/errors.py: 2 configuration or input, 3 store, 4 bus, 5 a
part that did not start, 6 another notifier holds the lease, 1 any other)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from streaming.config import FleetwatchConfig, load_config
from streaming.plumbing.errors import ConfigError, run_command

__all__ = ["main"]


def _config(args: argparse.Namespace) -> FleetwatchConfig:
    return load_config(getattr(args, "config", None))


def _demo(args: argparse.Namespace) -> int:
    from streaming.demo import DemoOptions, run_demo

    for flag, value, low in (("--clusters", args.clusters, 1), ("--brokers", args.brokers, 1),
                             ("--first-fault-s", args.first_fault_s, 10), ("--fault-every-s", args.fault_every_s, 1)):
        if value < low:
            raise ConfigError(f"{flag} must be at least {low}")
    return run_demo(_config(args), DemoOptions(
        clusters=args.clusters, brokers=args.brokers, port=args.port, workdir=Path(args.workdir),
        first_fault_s=args.first_fault_s, fault_every_s=args.fault_every_s, real_kafka=args.real_kafka,
        verbose=args.verbose))


def _run(args: argparse.Namespace) -> int:
    config = _config(args)  # a bad config is told at once, before Spark's modules load
    if args.metrics_port is not None:
        from streaming.metrics import metrics_auth_from_env

        metrics_auth_from_env()  # and /metrics' auth: half a pair, an example secret
    from streaming.job import RunOptions, run_job

    return run_job(config, RunOptions(log_file=Path(args.log_file), verbose=args.verbose,
                                             metrics_port=args.metrics_port, metrics_host=args.metrics_host))


def _replay(args: argparse.Namespace) -> int:
    from streaming.job import replay_file
    from streaming.store import Store

    events = Path(args.events)
    if not events.is_file():
        raise ConfigError(f"{events}: no such file")
    config = _config(args)
    if args.what_if:
        from streaming.ops import whatif

        # Both sides are the product's replay, as below without a store: a what-if records nothing.
        *_, report = whatif.what_if(events, config, args.what_if,
                                    lambda path, out, cfg: replay_file(path, out, cfg).alerts, args.alerts_out)
        print(report)
        return 0
    if args.alerts_out is None:
        raise ConfigError("--alerts-out is required (but with --what-if)")
    # The store is written only when the config names one; a plain replay writes the file only.
    store = Store(config.store.url) if args.config and "store" in config.model_fields_set else None
    summary = replay_file(events, args.alerts_out, config, store=store)
    print(summary.render())
    return 0


def _export(args: argparse.Namespace) -> int:
    from streaming.bus import BusAccess
    from streaming.ops import export

    since, until = export.parse_time(args.since, "--since"), export.parse_time(args.until, "--until")
    export.check_range(since, until)
    if args.read_past_ms < 0:
        raise ConfigError("--read-past-ms must be at least 0")
    config = _config(args)
    bootstrap = args.bootstrap or config.bus.bootstrap_servers
    if bootstrap is None:
        raise ConfigError("export reads a running bus: name it with bus.bootstrap_servers in --config or "
                          "--bootstrap (the embedded bus lives only as long as its job)")
    access = BusAccess.from_config(bootstrap, config.bus.security)
    summary = export.export_range(access, since, until, Path(args.out), skew_ms=config.rules.max_clock_skew_ms,
                           read_past_ms=args.read_past_ms)
    print(summary.render())
    return 0


def _simulate(args: argparse.Namespace) -> int:
    from streaming.collect import simulate

    return simulate.command(args)


def _dashboard(args: argparse.Namespace) -> int:
    from dashboard import cli

    return cli.command(args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fleetwatch",
        description="Watch a fleet of Kafka clusters: partitioned and fenced brokers, misrouted "
                    "connections, cluster-identity violations and controller trouble.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    from streaming.metrics import add_metrics_arguments
    from streaming.ops import check_config

    def command(name: str, help_text: str, func: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(func=func)
        return p

    p = command("demo", "embedded broker + simulated fleet with faults + Spark job + notifier + dashboard", _demo)
    p.add_argument("--config", help="optional config file (rules, spark settings; its alerting is not used)")
    p.add_argument("--clusters", type=int, default=20, help="simulated clusters (default 20)")
    p.add_argument("--brokers", type=int, default=4, help="brokers per cluster (default 4)")
    p.add_argument("--port", type=int, default=8050, help="dashboard port (default 8050)")
    p.add_argument("--workdir", default="var/demo",
                   help="where the demo keeps its store, checkpoint, logs and received alerts (emptied at start; "
                        "a folder the demo did not make is refused)")
    p.add_argument("--first-fault-s", type=int, default=30, metavar="S",
                   help="seconds from the job's start to the first simulated fault (default 30, at least 10)")
    p.add_argument("--fault-every-s", type=int, default=60, metavar="S",
                   help="seconds between simulated faults (default 60)")
    p.add_argument("--real-kafka", action="store_true",
                   help="also run a real Apache Kafka 4.4 cluster (4 JVMs) with a real fault every few minutes")
    p.add_argument("--verbose", action="store_true", help="JSON log lines on the terminal instead of a status line")

    p = command("run", "the long-running streaming job", _run)
    p.add_argument("--config", required=True, help="config file, e.g. conf/fleetwatch.yaml")
    p.add_argument("--log-file", default="var/fleetwatch-run.log", metavar="PATH",
                   help="on a terminal, where the log lines go (default var/fleetwatch-run.log)")
    p.add_argument("--verbose", action="store_true", help="on a terminal, JSON log lines instead of a status line")
    add_metrics_arguments(p)

    p = command("replay", "run the detectors over a recorded JSONL file, deterministically", _replay)
    p.add_argument("events", help="recorded events, one contract-v1 JSON object per line")
    p.add_argument("--alerts-out", help="where to write the alert lines (JSONL); required but with --what-if, "
                                        "where it gets today's lines")
    p.add_argument("--config", help="config file (rules; the store, when it names one)")
    p.add_argument("--what-if", action="append", metavar="KEY=VALUE",
                   help="replay twice, with the config's rules and with this change (rules.KEY=VALUE or "
                        "clusters[NAME].rules.KEY=VALUE; repeatable), and print per rule the alerts added, "
                        "removed and moved as Markdown; nothing is stored")

    p = command("export", "write a time range of the bus's telemetry as a file `replay` reads", _export)
    p.add_argument("--config", help="config file (the bus and its security; rules.max_clock_skew_ms)")
    p.add_argument("--bootstrap", metavar="HOST:PORT", help="the bus's address (default: bus.bootstrap_servers)")
    p.add_argument("--since", required=True, metavar="TIME",
                   help="first event time (ISO 8601, e.g. 2026-11-27T09:00:00Z, UTC without a zone; or epoch ms)")
    p.add_argument("--until", required=True, metavar="TIME", help="end of the range, exclusive (as --since)")
    p.add_argument("--out", required=True, metavar="FILE", help="the JSONL file to write")
    p.add_argument("--read-past-ms", type=int, default=600_000, metavar="MS",
                   help="read records published up to this long after --until, for events a collector "
                        "sent late (default 600000)")

    from dashboard import cli as dashboard_cli
    from streaming.collect import probe, simulate
    from streaming.notify import cli as notify_cli
    from streaming.ops import alert_commands

    simulate.configure_parser(command("simulate", "generate a fleet's telemetry with injected faults",
                                      _simulate))
    dashboard_cli.configure_parser(command("dashboard", "serve the SRE dashboard", _dashboard))
    probe.configure_parser(command("probe", "poll real Kafka clusters and publish their metadata", probe.command))
    check_config.configure_parser(command(
        "check-config", "validate config files: every problem with its file, line and path (exit 2)",
        check_config.command))
    notify_cli.configure_parser(command("notify", "deliver alerts from the store's outbox to the receivers",
                                        notify_cli.command))
    notify_cli.configure_silence_parser(command("silence", "add, list and expire silences",
                                                notify_cli.silence_command))
    alert_commands.configure_parser(command("alerts", "list alerts; resolve a stuck alert by hand",
                                            alert_commands.command))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from streaming.plumbing.logs import setup_logging

    args = _parser().parse_args(argv)
    setup_logging()
    return run_command(args.command, lambda: args.func(args))


if __name__ == "__main__":
    sys.exit(main())
