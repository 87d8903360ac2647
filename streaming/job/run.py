"""`fleetwatch run` and the spark-submit driver: the live job on a console.

`run_job(config, RunOptions)` runs the coordinator's live job (`streaming.job.coordinator`) until
SIGINT/SIGTERM (the current micro-batch finishes first) or a failure that a restart of its query
cannot fix, with the console as its observer; the exit code. With no bus configured the job
starts an embedded one; it waits for the store while the database is down.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import make_url

from streaming.config import FleetwatchConfig
from streaming.job.console import JobView, duration_text, open_console, plural
from streaming.job.coordinator import JobCoordinator
from streaming.job.plans import LivePlan, Wiring
from streaming.job.supervise import query_failure_line

__all__ = ["RunOptions", "run_job"]


@dataclass(frozen=True)
class RunOptions:
    """How `run_job` shows itself: where the log lines go on a terminal, and /metrics."""

    log_file: Path = Path("var/fleetwatch-run.log")
    verbose: bool = False  # on a terminal, JSON log lines instead of a status line
    metrics_port: int | None = None  # None: no Prometheus /metrics
    metrics_host: str = "127.0.0.1"  # loopback unless told (--metrics-host)


def run_job(config: FleetwatchConfig, options: RunOptions) -> int:
    log_path = options.log_file

    def banner(wiring: Wiring) -> tuple[str, Sequence[tuple[str, str]]]:
        rows = [("bus", f"{wiring.bus}" + (" (embedded Tansu: no bus configured)" if wiring.embedded else "")),
                ("store", make_url(config.store.url).render_as_string(hide_password=True)),
                ("checkpoint", config.spark.checkpoint_dir)]
        if wiring.metrics_url is not None:
            rows.append(("metrics", wiring.metrics_url))
        rows += [("logs", f"{log_path} (--verbose shows them here)"),
                 ("stop", "Ctrl-C (the current micro-batch finishes first)")]
        return "fleetwatch run: the streaming job", rows

    metrics = None if options.metrics_port is None else (options.metrics_port, options.metrics_host)
    with open_console(log_path, verbose=options.verbose) as console:
        view = JobView(console, banner, deliveries_shown=False)
        outcome = JobCoordinator(config, LivePlan(metrics=metrics), view).run()
        if not view.shown:  # stopped while the store was out of reach: nothing was started to speak of
            return 0
        if outcome.failure is not None:
            console.closing(f"fleetwatch run: the streaming job failed: {query_failure_line(outcome.failure)}; "
                            f"details in {log_path}")
            return 1
        final = view.last
        console.closing(f"fleetwatch run stopped after {duration_text(final.elapsed_s)}: "
                        f"{plural(final.batches, 'micro-batch', 'micro-batches')}, "
                        f"{plural(final.alerts_seen, 'alert')} in the store ({final.firing} firing)")
        return 0
