"""Prometheus `/metrics`: the process counters at the bottom, the exposition on top.

- `increment(counter)`: count what went wrong without failing the job (`counters`: no import of
  the project, so any stage may count).
- `render_metrics(engine)`, `start_metrics_server(store, port, host)`, `MetricsServer`, `wsgi_app`:
  the exposition of the store's fleet gauges and the counters (`exposition`), served by a fixed
  pool of threads that idle connections cannot hold (`serving`).
- `add_metrics_arguments(parser)`: `--metrics-port`/`--metrics-host` for the commands that serve it,
  and who may read it, `metrics_auth_from_env()` (`access`): a command checks it before it starts
  anything (a missing half of a pair, a `change-me…` example secret: a ConfigError).

Served by the job's coordinator (streaming/job/coordinator.py) for `fleetwatch run` and the spark-submit
driver; above the store it reads.
"""

from streaming.metrics.access import add_metrics_arguments, metrics_auth_from_env
from streaming.metrics.counters import COUNTERS, increment
from streaming.metrics.exposition import (
    CONTENT_TYPE,
    MetricsServer,
    render_metrics,
    start_metrics_server,
    wsgi_app,
)

__all__ = ["CONTENT_TYPE", "COUNTERS", "MetricsServer", "add_metrics_arguments", "increment",
           "metrics_auth_from_env", "render_metrics", "start_metrics_server", "wsgi_app"]
