"""The driver program under spark-submit and the Spark Operator: `fleetwatch run` on the cluster's master.

`deploy/spark/fleetwatch_job.py` (the application file spark-submit runs) calls `main()`. The
SparkSession is created first from what spark-submit passed (`--master`, `--conf`, `--jars`),
so the config's `spark.master` does not override the cluster's; `fleetwatch run`'s job
(`streaming.job.run_job`, on the job coordinator) then takes the session over unchanged: same
pipeline, same store, same SIGTERM handling (the running micro-batch finishes, then the query
stops), and a failed query restarts from its checkpoint in this session (`streaming.job.supervise`).
`--metrics-port` serves Prometheus `/metrics` from the driver for as long as the job runs, on
`--metrics-host` (default 127.0.0.1; the Kubernetes manifest says 0.0.0.0), with the auth of
`streaming.metrics` (FLEETWATCH_METRICS_TOKEN, ...).

Outside spark-submit (no py4j gateway handed over), it runs with the config's `spark.master`.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from streaming.config import ConfigError, load_config
from streaming.metrics import add_metrics_arguments, metrics_auth_from_env

__all__ = ["main"]

log = logging.getLogger("streaming.ops.submit")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fleetwatch_job.py",
                                description="fleetwatch streaming job (driver program for spark-submit)")
    p.add_argument("--config", required=True, help="config file, e.g. /etc/fleetwatch/fleetwatch.yaml")
    add_metrics_arguments(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from streaming.plumbing.logs import setup_logging

    args = _parser().parse_args(argv)
    setup_logging()
    try:
        config = load_config(args.config)
        if args.metrics_port is not None:
            metrics_auth_from_env()  # before Spark starts: half a pair, an example secret
    except ConfigError as exc:
        print(f"fleetwatch job: {exc}", file=sys.stderr)
        return 2
    if config.bus.bootstrap_servers is None:
        # An embedded broker on a cluster's driver is reachable by no collector.
        print(f"fleetwatch job: {args.config}: bus.bootstrap_servers must name the telemetry bus "
              "when the job runs on a cluster", file=sys.stderr)
        return 2
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from streaming.job import context_settings

    builder = SparkSession.builder.config(map=context_settings(config))
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # not under spark-submit: the config says where
        builder = builder.master(config.spark.master)
    spark = builder.getOrCreate()
    master = spark.sparkContext.master
    log.info("driver started", extra={"master": master, "app_id": spark.sparkContext.applicationId,
                                      "config": args.config})
    if master != config.spark.master:
        log.info("spark.master of the config ignored: spark-submit's master wins",
                 extra={"config_master": config.spark.master, "master": master})

    from streaming.job import RunOptions, run_job

    # `run_job` waits for the store while it is down, as `run` does, and serves /metrics from it.
    try:
        return run_job(config, RunOptions(metrics_port=args.metrics_port, metrics_host=args.metrics_host))
    except ConfigError as exc:
        print(f"fleetwatch run: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130

if __name__ == "__main__":
    sys.exit(main())
