"""Prometheus `/metrics`: fleet gauges read from the store, in the plain-text exposition format.

Every scrape reads the store with a few grouped statements (the store's `fleet_rows`,
`source_clock_rows`, `firing_broker_details`, `recent_incidents`), so the endpoint holds no state and
any process that reaches the store can serve it: `fleetwatch run --metrics-port`, the
spark-submit driver (`streaming.ops.submit`), or a WSGI server (`wsgi_app`).

Families (all gauges; `cluster_id` and `target` are "" when unknown):
- `fleetwatch_brokers{cluster_id,target,state}`: brokers by lifecycle state (every state listed,
  zeros included, so a state that empties is seen going to 0).
- `fleetwatch_alerts_firing{cluster_id,target,rule,severity}`: firing alerts. A target rule's
  alert is attributed to the target's pinned (else last seen) cluster id, as on the dashboard.
- `fleetwatch_rule_alerts_firing{rule,severity}`: firing alerts fleet-wide, every rule listed.
- `fleetwatch_cluster_controller_id`, `fleetwatch_cluster_last_response_timestamp_seconds`
  `{cluster_id,target}`.
- `fleetwatch_pipeline_*{query}` from the latest `pipeline_progress` row of each streaming query:
  batch duration, input rows, processed rows/s, watermark, lag (wall clock - watermark, so it
  includes the allowed lateness), time of the last batch, batch id, state rows.
- `fleetwatch_job_restarts_total{query}` (a counter, over every run of the job: the store keeps it)
  and `fleetwatch_job_last_failure_timestamp_seconds{query}`: the streaming queries the job restarted
  after they failed, listed from 0 for every query with progress.
- `fleetwatch_quarantine_messages{reason}` (rows) and `fleetwatch_quarantine_not_stored_messages{reason}`
  (counted on them, not stored: retention.quarantine_rows_per_reason); `fleetwatch_quarantine_stored_rows_total`
  (a counter: the table's last row id, which grows while the table is held at its cap),
  `fleetwatch_outbox_pending`, `fleetwatch_outbox_failing`, `fleetwatch_outbox_oldest_pending_timestamp_seconds`.
- `fleetwatch_source_clock_lead_seconds{source}`: how far the event times of a collector (the
  events' `source`) led the job's clock in the latest micro-batch that had its events
  (`source_clocks`; negative: the delivery delay of a clock in step), and
  `fleetwatch_source_quarantined_ahead_messages{source}`: its messages in quarantine for a `ts`
  ahead of the clock (ts_ahead_of_clock, or ts_out_of_range in the future). Each lists at most
  `_SOURCE_SERIES` sources (those that lead most, those with most refused), the first only sources
  heard of in the last `_SOURCE_RECENT_MS`: a source id is whatever a producer writes.
- `fleetwatch_incident_partitions{cluster_id,broker_id,rule,impact}`: the blast radius of each firing
  broker incident (issue 30, its `details.impact`): `impact` is led, replicas, offline or
  under_min_isr (partitions). At most `_IMPACT_SERIES` incidents, the latest.
- `fleetwatch_fleet_incidents{status,domain}`: fleet incidents (streaming/detect/README.md, "Fleet
  incidents") among the alerts that started within a day of the newest one, by status (firing,
  resolved) and the kind of domain they share, every pair listed. Grouped as the notifier groups
  them: the domains the store knows (racks, addresses) and the serving job's `incidents:` settings
  and clusters' tags (streaming.store's `IncidentScope`; a server given none groups with the defaults
  and no tags).
- `fleetwatch_store_up` (0 when the store cannot be read; the scrape itself still succeeds) and
  `fleetwatch_metrics_render_seconds`.

Counters of the serving process (the job's, when it serves `/metrics`; streaming.metrics.counters):
`increment()` counts what went wrong without failing the job, e.g. `fleetwatch_store_write_retries_total` and
`fleetwatch_alert_publish_failures_total`. Every counter is listed from 0.

Where it listens and who may read it (streaming.metrics.access): `--metrics-host` (default
$FLEETWATCH_METRICS_HOST, else 127.0.0.1: loopback, for a Prometheus on the same host; 0.0.0.0 in
a pod, where Prometheus scrapes the pod's address). `/metrics` needs a bearer token when FLEETWATCH_METRICS_TOKEN (or
FLEETWATCH_METRICS_TOKEN_FILE, a file holding it) is set, or basic auth when
FLEETWATCH_METRICS_USER and FLEETWATCH_METRICS_PASSWORD (or _PASSWORD_FILE) are; with both, either
is accepted; a user without a password (or the reverse) is an error. Secrets are never logged.
`/healthz` needs none. Listening beyond loopback without auth is logged as a warning. Its server
holds a fixed handful of threads whatever its clients do (`serving`): a connection that has not
sent its whole request within 10 s is closed, and idle ones never hold up a scrape.

Cardinality: labels come from the fleet (cluster ids, targets: one series per cluster), from
closed lists (states, rules, severities) or from the reason codes of quarantine, grouped by code
(`wrong_type:brokers[3].port` counts as `wrong_type`): no label takes raw values of an event, but
`source`, capped at `_SOURCE_SERIES` series per family.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from streaming.config import DOMAIN_KINDS
from streaming.metrics.access import (
    DEFAULT_METRICS_HOST,
    MetricsAuth,
    is_loopback,
    metrics_auth_from_env,
    metrics_host,
)
from streaming.metrics.counters import COUNTERS, counter_values
from streaming.metrics.serving import REQUEST_TIMEOUT_S, BoundedHTTPServer, ReadHeadHandler
from streaming.plumbing import clock
from streaming.plumbing.errors import first_line
from streaming.records.alert import RULES
from streaming.records.contract import BROKER_STATES
from streaming.store import IncidentScope, firing_broker_details, fleet_rows, recent_incidents, source_clock_rows

__all__ = [
    "CONTENT_TYPE",
    "MetricsServer",
    "render_metrics",
    "start_metrics_server",
    "wsgi_app",
]

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_STATES = (*sorted(BROKER_STATES), "UNKNOWN")
_INCIDENT_DAY_MS = 86_400_000
_FROM_ENV: Any = object()  # the servers' auth default: metrics_auth_from_env()
_NO_SCOPE = IncidentScope()  # a server told nothing of the config: default grouping, no tags


@dataclass
class _Family:
    name: str
    help: str
    samples: list[tuple[dict[str, str], float]] = field(default_factory=list)
    kind: str = "gauge"

    def add(self, value: float | int | None, **labels: Any) -> None:
        if value is None:
            return
        self.samples.append(({k: "" if v is None else str(v) for k, v in labels.items()}, float(value)))

    def render(self) -> Iterator[str]:
        yield f"# HELP {self.name} {_escape_help(self.help)}"
        yield f"# TYPE {self.name} {self.kind}"
        for labels, value in self.samples:
            if labels:
                inner = ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels.items())
                yield f"{self.name}{{{inner}}} {_format_value(value)}"
            else:
                yield f"{self.name} {_format_value(value)}"


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _format_value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(value)


def _seconds(ms: int | float | None) -> float | None:
    return None if ms is None else ms / 1000.0


def _number(value: Any) -> float | None:
    """JSON-typed progress columns may hold a number, a numeric string or nothing."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _fleet(engine: Engine, now_ms: int) -> list[_Family]:
    brokers_by_state = _Family("fleetwatch_brokers", "Brokers by lifecycle state (UNKNOWN: no state event yet).")
    firing = _Family("fleetwatch_alerts_firing", "Firing alerts by cluster, target and rule.")
    by_rule = _Family("fleetwatch_rule_alerts_firing", "Firing alerts in the whole fleet by rule.")
    controller = _Family("fleetwatch_cluster_controller_id",
                         "Active controller the cluster's responses report (-1: none).")
    last_response = _Family("fleetwatch_cluster_last_response_timestamp_seconds",
                            "Event time of the cluster's latest successful response.")
    pipe = {name: _Family(f"fleetwatch_pipeline_{name}", text) for name, text in (
        ("batch_duration_seconds", "Duration of the latest micro-batch."),
        ("input_rows", "Input rows of the latest micro-batch."),
        ("processed_rows_per_second", "Processing rate of the latest micro-batch."),
        ("watermark_timestamp_seconds", "Event-time watermark after the latest micro-batch."),
        ("lag_seconds", "Wall clock minus the event-time watermark (includes the allowed lateness; negative "
                        "when the watermark is ahead of the wall clock)."),
        ("last_batch_timestamp_seconds", "Wall-clock time the latest micro-batch was recorded."),
        ("last_batch_id", "Id of the latest micro-batch."),
        ("state_rows", "Rows in the detector's state store after the latest micro-batch."),
    )}
    restarts = _Family("fleetwatch_job_restarts_total",
                       "Restarts of the job's streaming query after it failed, over every run.", kind="counter")
    last_failure = _Family("fleetwatch_job_last_failure_timestamp_seconds",
                           "When the job's streaming query last failed and was restarted.")
    quarantined = _Family("fleetwatch_quarantine_messages", "Quarantined messages in the store by reason.")
    not_stored = _Family("fleetwatch_quarantine_not_stored_messages",
                         "Quarantined messages counted in the store by reason, not stored: over "
                         "retention.quarantine_rows_per_reason in their micro-batch.")
    stored_rows = _Family("fleetwatch_quarantine_stored_rows_total",
                          "Quarantine rows ever stored (its last row id): grows while the table is at its "
                          "cap, retention.quarantine_max_rows.", kind="counter")
    pending = _Family("fleetwatch_outbox_pending", "Alert notifications not delivered yet.")
    failing = _Family("fleetwatch_outbox_failing", "Undelivered notifications whose last attempt failed.")
    oldest = _Family("fleetwatch_outbox_oldest_pending_timestamp_seconds",
                     "Creation time of the oldest undelivered notification.")

    rows = fleet_rows(engine)
    counts: dict[tuple[str, str], dict[str, int]] = {}
    for cluster_id, target, st, n in rows.brokers:
        counts.setdefault((cluster_id, target or ""), {})[st] = n
    for (cluster_id, target), per_state in counts.items():
        for st in _STATES:
            if st != "UNKNOWN" or st in per_state:
                brokers_by_state.add(per_state.get(st, 0), cluster_id=cluster_id, target=target, state=st)

    rule_totals: dict[str, int] = {}
    for cluster_id, target, rule, severity, n in rows.firing:
        firing.add(n, cluster_id=cluster_id, target=target, rule=rule, severity=severity)
        rule_totals[rule] = rule_totals.get(rule, 0) + n
    for rule, (severity, _subject) in sorted(RULES.items()):
        by_rule.add(rule_totals.get(rule, 0), rule=rule, severity=severity)

    for cluster_id, target, controller_id, last_ms in rows.clusters:
        controller.add(-1 if controller_id is None else controller_id, cluster_id=cluster_id, target=target)
        last_response.add(_seconds(last_ms), cluster_id=cluster_id, target=target)

    queries: set[str] = set()
    for row in rows.progress:
        queries.add(row.query)
        q = {"query": row.query}
        pipe["batch_duration_seconds"].add(_seconds(row.batch_duration_ms), **q)
        pipe["input_rows"].add(row.input_rows, **q)
        pipe["processed_rows_per_second"].add(_number(row.processed_rows_per_s), **q)
        pipe["watermark_timestamp_seconds"].add(_seconds(row.watermark_ms), **q)
        if row.watermark_ms:
            # Not clamped at 0: a watermark ahead of the wall clock (events from the future moved
            # it) is negative lag, and FleetwatchWatermarkAhead pages on it.
            pipe["lag_seconds"].add((now_ms - row.watermark_ms) / 1000.0, **q)
        pipe["last_batch_timestamp_seconds"].add(_seconds(row.recorded_at), **q)
        pipe["last_batch_id"].add(row.batch_id, **q)
        pipe["state_rows"].add(row.state_rows, **q)

    restarted = {row.query: row for row in rows.restarts}
    for query in sorted(queries | restarted.keys()):
        row = restarted.get(query)
        restarts.add(row.restarts if row else 0, query=query)
        last_failure.add(_seconds(row.last_failure_ms) if row else None, query=query)

    by_code: dict[str, list[int]] = {}
    for reason, n, more in rows.quarantine:
        code = reason.split(":", 1)[0]  # the field path (with list indices) stays in the store
        sums = by_code.setdefault(code, [0, 0])
        sums[0] += n
        sums[1] += int(more or 0)  # PostgreSQL sums a BIGINT as a NUMERIC
    for code, (n, more) in sorted(by_code.items()):
        quarantined.add(n, reason=code)
        not_stored.add(more, reason=code)
    stored_rows.add(rows.quarantine_last_id)

    undelivered, with_error, oldest_ms = rows.outbox
    pending.add(undelivered)
    failing.add(with_error)
    oldest.add(_seconds(oldest_ms))
    return [brokers_by_state, firing, by_rule, controller, last_response, *pipe.values(), restarts, last_failure,
            quarantined, not_stored, stored_rows, pending, failing, oldest]


# Per-source families: at most this many series each, of sources heard of this recently (ms).
_SOURCE_SERIES = 100
_SOURCE_RECENT_MS = 15 * 60_000


def _source_clock_families(engine: Engine, now_ms: int) -> list[_Family]:
    """How far each collector's clock runs ahead of the job's (streaming/detect/README.md, "Input bounds")."""
    lead = _Family("fleetwatch_source_clock_lead_seconds",
                   "How far the source's event times led the job's clock in the latest micro-batch with its "
                   "events (negative: delivery delay); beyond rules.max_source_lead_ms they are quarantined.")
    ahead = _Family("fleetwatch_source_quarantined_ahead_messages",
                    "The source's messages in quarantine for an event time ahead of the job's clock.")
    leads, refused = source_clock_rows(engine, now_ms - _SOURCE_RECENT_MS, _SOURCE_SERIES)
    for source, lead_ms in leads:
        lead.add(lead_ms / 1000.0, source=source)
    for source, n in refused:
        ahead.add(n, source=source)
    return [lead, ahead]


# The firing broker incidents whose blast radius /metrics lists (the latest ones).
_IMPACT_SERIES = 250
_IMPACT_KEYS = {"led": "partitions_led", "replicas": "replicas_held", "offline": "partitions_offline",
                "under_min_isr": "partitions_under_min_isr"}


def _impact_families(engine: Engine) -> list[_Family]:
    """The blast radius of the firing broker incidents (streaming/detect/partitions.py)."""
    family = _Family("fleetwatch_incident_partitions",
                     "Partitions a firing broker incident touches: led, replicas held, offline and under "
                     "min.insync.replicas because of it (from the cluster's partition layout).")
    for cluster_id, broker_id, rule, details in firing_broker_details(engine, _IMPACT_SERIES):
        impact = (details or {}).get("impact") if isinstance(details, dict) else None
        if isinstance(impact, dict):
            for name, key in _IMPACT_KEYS.items():
                family.add(_number(impact.get(key)), cluster_id=cluster_id or "", broker_id=broker_id,
                           rule=rule, impact=name)
    return [family]


def _incident_families(engine: Engine, scope: IncidentScope) -> list[_Family]:
    family = _Family("fleetwatch_fleet_incidents", "Fleet incidents (alerts of several clusters sharing a failure "
                     "domain) among the alerts of the last day of the store, by status and domain kind.")
    counts = Counter((i.status, i.domain.kind) for i in recent_incidents(engine, scope, _INCIDENT_DAY_MS))
    for status in ("firing", "resolved"):
        for kind in DOMAIN_KINDS:
            family.add(counts[(status, kind)], status=status, domain=kind)
    return [family]


def render_metrics(engine: Engine, now_ms: int | None = None, incidents: IncidentScope = _NO_SCOPE) -> str:
    """The exposition text for one scrape. A store that cannot be read gives `fleetwatch_store_up 0`."""
    started = time.perf_counter()
    now_ms = clock.now_ms() if now_ms is None else now_ms
    up = _Family("fleetwatch_store_up", "1 when the store could be read for this scrape.")
    try:
        families = [*_fleet(engine, now_ms), *_source_clock_families(engine, now_ms),
                    *_incident_families(engine, incidents), *_impact_families(engine)]
        up.add(1)
    except SQLAlchemyError as exc:
        log.warning("metrics: cannot read the store", extra={"error": first_line(exc, named=True)})
        families = []
        up.add(0)
    took = _Family("fleetwatch_metrics_render_seconds", "Time spent reading the store for this scrape.")
    took.add(round(time.perf_counter() - started, 6))
    counts = counter_values()
    counters = [_Family(name, text, [({}, counts[name])], kind="counter") for name, text in COUNTERS.items()]
    return "\n".join(line for fam in (up, *families, took, *counters) for line in fam.render()) + "\n"


def _engine_of(store: Any) -> Engine:
    if isinstance(store, Engine):
        return store
    if isinstance(store, str):
        from streaming.store import Store

        return Store(store).engine
    return store.engine


def _answer(engine: Engine, incidents: IncidentScope, required: MetricsAuth | None, path: str,
            authorization: str | None) -> tuple[int, list[tuple[str, str]], bytes]:
    """(status, headers, body) of a GET of `path`, for both servers: `/metrics` (behind `required`),
    `/healthz` (open), anything else 404."""
    if path == "/metrics" and required is not None and not required.allows(authorization):
        scheme = "Bearer" if required.token is not None else "Basic"
        status, ctype, body = 401, "text/plain", b"authentication required\n"
        return status, [("Content-Type", ctype), ("Content-Length", str(len(body))),
                        ("WWW-Authenticate", f'{scheme} realm="fleetwatch"')], body
    if path == "/metrics":
        status, ctype, body = 200, CONTENT_TYPE, render_metrics(engine, incidents=incidents).encode()
    elif path == "/healthz":
        status, ctype, body = 200, "text/plain", b"ok\n"
    else:
        status, ctype, body = 404, "text/plain", b"not found: try /metrics\n"
    return status, [("Content-Type", ctype), ("Content-Length", str(len(body)))], body


def wsgi_app(store: Any, auth: Any = _FROM_ENV, incidents: IncidentScope = _NO_SCOPE
             ) -> Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]:
    """A WSGI app serving `/metrics` (and `/healthz`) for a Store, an Engine or a store URL, with
    the auth the environment sets (`metrics_auth_from_env`) unless `auth` is given (None: none)."""
    engine = _engine_of(store)
    required = metrics_auth_from_env() if auth is _FROM_ENV else auth

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        status, headers, body = _answer(engine, incidents, required, environ.get("PATH_INFO") or "/",
                                        environ.get("HTTP_AUTHORIZATION"))
        start_response(f"{status} {HTTPStatus(status).phrase}", headers)
        return [body]

    return app


class MetricsServer:
    """`/metrics` on a plain HTTP server of a few daemon threads (`serving.BoundedHTTPServer`: a
    fixed pool, a connection handed to it only once its request arrived, one that sends nothing
    closed after `request_timeout_s`); `stop()` closes it.

    `auth`: what `/metrics` asks for; by default what the environment says (`metrics_auth_from_env`),
    None for nothing."""

    def __init__(self, store: Any, port: int, host: str = DEFAULT_METRICS_HOST, auth: Any = _FROM_ENV,
                 incidents: IncidentScope = _NO_SCOPE, *, request_timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        engine = _engine_of(store)
        host = metrics_host(host)
        self.auth: MetricsAuth | None = metrics_auth_from_env() if auth is _FROM_ENV else auth
        required = self.auth

        class Handler(ReadHeadHandler):
            def do_GET(self) -> None:
                status, headers, body = _answer(engine, incidents, required, self.path.split("?", 1)[0],
                                                self.headers.get("Authorization"))
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("metrics request", extra={"client": self.client_address[0], "line": format % args})

        self._server = BoundedHTTPServer(host, port, Handler, request_timeout_s=request_timeout_s)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> MetricsServer:
        self._server.start()
        host = str(self._server.server_address[0])
        auth = "none" if self.auth is None else ("token" if self.auth.token else "") + (
            "+basic" if self.auth.token and self.auth.user else "basic" if self.auth.user else "")
        log.info("metrics endpoint up", extra={"address": f"{host}:{self.port}", "path": "/metrics", "auth": auth})
        if self.auth is None and not is_loopback(host):
            log.warning(f"/metrics listens on {host} without auth: anyone who reaches the port reads the fleet's "
                        "state (set FLEETWATCH_METRICS_TOKEN, or keep the port inside the cluster)",
                        extra={"address": f"{host}:{self.port}"})
        return self

    def stop(self) -> None:
        self._server.stop()


def start_metrics_server(store: Any, port: int, host: str = DEFAULT_METRICS_HOST,
                         auth: Any = _FROM_ENV, incidents: IncidentScope = _NO_SCOPE, *,
                         request_timeout_s: float = REQUEST_TIMEOUT_S) -> MetricsServer:
    """Serve `/metrics` for `store` (a Store, an Engine or a URL) on host:port (0: any free port),
    with the auth the environment sets unless `auth` is given (None: none)."""
    return MetricsServer(store, port, host, auth, incidents, request_timeout_s=request_timeout_s).start()
