"""The `fleetwatch` command line."""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path

from streaming.config import ConfigError, FleetwatchConfig, load_config

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
    from sqlalchemy.engine import make_url

    from streaming.bus import BusAccess, EmbeddedBus
    from streaming.console import StatusReader, StatusTicker, duration_text, open_console, plural
    from streaming.job import spark_session
    from streaming.live import QUERY_NAME, AlertPublisher, open_store, start_job, stop_gracefully, stop_on_signals
    from streaming.ops.metrics import serve_metrics_from_args
    from streaming.resilience import Stopping

    config = _config(args)
    stop = threading.Event()
    stop_on_signals(stop)
    log_path = Path(args.log_file)
    with open_console(log_path, verbose=args.verbose) as console:
        with ExitStack() as stack:  # stops what started, in reverse order
            bus = None
            if config.bus.bootstrap_servers is None:
                bus = EmbeddedBus(partitions=config.bus.partitions).start()
                stack.callback(bus.stop)
            # A configured bus is reached with its security; the embedded one is plain loopback.
            access = (BusAccess.from_config(config.bus.bootstrap_servers, config.bus.security)
                      if bus is None else BusAccess(bus.bootstrap))
            bootstrap = access.bootstrap
            store = open_store(config.store.url, stop)  # waits (and says so) while the database is down
            if store is None:
                return 0
            stack.callback(store.close)
            metrics = serve_metrics_from_args(args, store)  # Prometheus /metrics, when --metrics-port is given
            if metrics is not None:
                stack.callback(metrics.stop)
            rows = [("bus", bootstrap + (" (embedded Tansu: no bus configured)" if bus is not None else "")),
                    ("store", make_url(config.store.url).render_as_string(hide_password=True)),
                    ("checkpoint", config.spark.checkpoint_dir)]
            if metrics is not None:
                rows.append(("metrics", f"http://{args.metrics_host}:{args.metrics_port}/metrics"))
            rows += [("logs", f"{log_path} (--verbose shows them here)"),
                     ("stop", "Ctrl-C (the current micro-batch finishes first)")]
            console.banner("fleetwatch run: the streaming job", rows)
            ticker = StatusTicker(console, StatusReader(store, None, QUERY_NAME, deliveries_shown=False)).start()
            stack.callback(ticker.stop)
            ticker.phase = "starting Spark"
            spark = spark_session(config)
            stop_on_signals(stop)  # creating the SparkContext took over SIGINT
            stack.callback(spark.stop)
            publisher = AlertPublisher(access, partitions=config.bus.partitions)
            stack.callback(publisher.close)
            ticker.phase = "starting the job"
            try:
                query, ticker.reader.recorder = start_job(spark, config, access, store, publisher, stop=stop)
            except Stopping:  # asked to stop while the start waited for the store
                return 0
            ticker.phase = None
            try:
                while not stop.wait(1.0) and query.isActive:
                    pass
                ticker.phase = "stopping: finishing the current micro-batch"
            finally:
                stop_gracefully(spark, query)
            # Asked to stop, a batch waiting for the store gives up: that is no failure of the job.
            failure = None if stop.is_set() else query.exception()
            ticker.phase = None
            final = ticker.tick()
            ticker.phase = "stopping"
        if failure is not None:
            first = (str(failure).strip().splitlines() or [""])[0]
            console.closing(f"fleetwatch run: the streaming job failed: {first}; details in {log_path}")
            return 1
        console.closing(f"fleetwatch run stopped after {duration_text(final.elapsed_s)}: "
                        f"{plural(final.batches, 'micro-batch', 'micro-batches')}, "
                        f"{plural(final.alerts_seen, 'alert')} in the store ({final.firing} firing)")
        return 0


def _replay(args: argparse.Namespace) -> int:
    from streaming.replay import replay_file
    from streaming.store import Store

    events = Path(args.events)
    if not events.is_file():
        raise ConfigError(f"{events}: no such file")
    config = _config(args)
    # The store is written only when the config names one; a plain replay writes the file only.
    store = Store(config.store.url) if args.config and "store" in config.model_fields_set else None
    summary = replay_file(events, args.alerts_out, config, store=store)
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
    from streaming.ops import check_config
    from streaming.ops.metrics import add_metrics_arguments

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
                   help="where the demo keeps its store, checkpoint, logs and received alerts (emptied at start)")
    p.add_argument("--first-fault-s", type=int, default=30, metavar="S",
                   help="seconds from start to the first simulated fault (default 30, at least 10)")
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
    p.add_argument("--alerts-out", required=True, help="where to write the alert lines (JSONL)")
    p.add_argument("--config", help="config file (rules; the store, when it names one)")

    from dashboard import cli as dashboard_cli
    from streaming.collect import probe, simulate
    from streaming.notify import cli as notify_cli

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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from streaming.logs import setup_logging

    args = _parser().parse_args(argv)
    setup_logging()
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"fleetwatch {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
