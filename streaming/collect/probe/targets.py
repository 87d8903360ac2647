"""What to probe: the configured clusters as targets (addresses, TLS, SASL from the environment)
and the probe's options."""

from __future__ import annotations

import os
import socket
import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from streaming.collect.protocol.client import Security
from streaming.config import ClusterConfig, ConfigError, FleetwatchConfig, ProbeConfig, RuleSettings

__all__ = ["MAX_HOST_CHARS", "LayoutLimits", "ProbeOptions", "Target", "default_source", "endpoint_problem",
           "format_address", "parse_address", "targets_from_config"]

# A DNS name has at most 253 characters (RFC 1035, written without the final dot).
MAX_HOST_CHARS = 253
_DEFAULTS = ProbeConfig()


def default_source() -> str:
    return f"probe-{socket.gethostname()}"


@dataclass(frozen=True)
class LayoutLimits:
    """The partition layout's cadence and bounds per cluster (layout.py; `probe.layout_*` of the config)."""

    # 0: never read. Off unless asked for: `fleetwatch probe` takes `probe.layout_interval_ms` (60 s by default).
    interval_ms: int = 0
    max_bytes: int = _DEFAULTS.layout_max_bytes  # answers' bytes per reading of one cluster
    timeout_ms: int = _DEFAULTS.layout_timeout_ms  # one reading of one cluster
    page_partitions: int = 2000  # DescribeTopicPartitions' ResponsePartitionLimit (Kafka's default)
    configs_per_request: int = 500  # topics per DescribeConfigs


@dataclass(frozen=True)
class ProbeOptions:
    interval_ms: int = 5000
    timeout_ms: int = 3000  # one whole exchange with one address: connect, TLS, SASL, requests
    concurrency: int = 256  # exchanges (connections) in flight at once, over all targets
    source: str = field(default_factory=default_source)
    client_id: str = "fleetwatch-probe"
    # What one target may take (streaming/config/, ProbeConfig): exchanges in flight, endpoints
    # probed per round, and the largest answer read.
    target_concurrency: int = _DEFAULTS.target_concurrency
    max_endpoints: int = _DEFAULTS.max_endpoints_per_target
    max_response_bytes: int = _DEFAULTS.max_response_bytes
    layout: LayoutLimits = field(default_factory=LayoutLimits)
    # The fast quorum reading's cadence (quorum.py; 0: off): `probe.quorum_interval_ms`.
    quorum_interval_ms: int = _DEFAULTS.quorum_interval_ms

    def __post_init__(self) -> None:
        if min(self.interval_ms, self.timeout_ms, self.concurrency, self.target_concurrency, self.max_endpoints,
               self.max_response_bytes) <= 0 or self.quorum_interval_ms < 0:
            raise ValueError("interval_ms, timeout_ms, concurrency, target_concurrency, max_endpoints and "
                             "max_response_bytes must be positive, quorum_interval_ms not negative")


@dataclass(frozen=True)
class Target:
    """One configured cluster, ready to probe. `expected_cluster_id`: the configured pin
    (`clusters[].expected_cluster_id`), which the bootstrap asks a Kafka 4.4 broker to confirm
    (KIP-1242; see the package docstring)."""

    name: str
    bootstrap: tuple[tuple[str, int], ...]
    security: Security = field(default_factory=Security)
    forget_after_ms: int = RuleSettings().forget_after_ms
    expected_cluster_id: str | None = None
    # The controllers' Prometheus endpoints (`clusters[].controller_metrics`): the controller's view.
    controller_metrics: tuple[str, ...] = ()
    # Kafka's session timeout and heartbeat interval as the rules know them: an age at the session
    # timeout is the controller's cap, and heartbeats closer than half an interval are one.
    session_timeout_ms: int = RuleSettings().session_timeout_ms
    heartbeat_interval_ms: int = RuleSettings().heartbeat_interval_ms
    # broker.stalled's fetch age (`rules.stall_after_ms`; 0: off): a quorum reading that shows a broker
    # close to it is followed by one when it would reach it (quorum.py).
    stall_after_ms: int = RuleSettings().stall_after_ms


def parse_address(text: str) -> tuple[str, int]:
    """`host:port` or `[v6]:port` as (host, port)."""
    text = text.strip()
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"not a host:port address: {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def endpoint_problem(host: str, port: int) -> str | None:
    """Why an advertised (host, port) cannot be probed, or None: a port outside 1..65535, an empty
    or overlong host, or one with spaces or control characters."""
    if not 0 < port < 65536:
        return f"port {port} outside 1..65535"
    if not host:
        return "empty host"
    if len(host) > MAX_HOST_CHARS:
        return f"host of {len(host)} characters (at most {MAX_HOST_CHARS})"
    if not host.isprintable() or any(c.isspace() for c in host):
        return "host with spaces or control characters"
    return None


def _security(cluster: ClusterConfig, where: str, environ: Mapping[str, str]) -> Security:
    sec = cluster.security
    context = None
    if sec.protocol in ("SSL", "SASL_SSL"):
        try:
            context = ssl.create_default_context(cafile=sec.ssl_cafile)
            if sec.ssl_certfile:
                context.load_cert_chain(sec.ssl_certfile, sec.ssl_keyfile)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"{where}.security: cannot load TLS files: {exc}") from None
    username = password = None
    if sec.protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        if sec.sasl_mechanism is None:
            raise ConfigError(f"{where}.security.sasl_mechanism is required for {sec.protocol}")
        missing = []
        for key in ("username_env", "password_env"):
            name = getattr(sec, key)
            if not name:
                missing.append(f"{where}.security.{key} is not set")
            elif name not in environ:
                missing.append(f"environment variable {name} ({where}.security.{key}) is not set")
        if missing:
            raise ConfigError("; ".join(missing))
        username, password = environ[sec.username_env or ""], environ[sec.password_env or ""]
    return Security(protocol=sec.protocol, ssl_context=context, sasl_mechanism=sec.sasl_mechanism,
                    username=username, password=password)


def targets_from_config(config: FleetwatchConfig, *, only: Iterable[str] | None = None,
                        environ: Mapping[str, str] | None = None) -> list[Target]:
    """The configured clusters as probe targets; secrets come from the environment.

    Raises ConfigError (one line) for a missing bootstrap list, a bad address, unreadable TLS
    files, or SASL credentials whose environment variables are not set.
    """
    environ = os.environ if environ is None else environ
    wanted = set(only) if only else None
    names = {c.name for c in config.clusters}
    if wanted and (unknown := sorted(wanted - names)):
        raise ConfigError(f"no configured cluster named {', '.join(unknown)}")
    book = config.rule_book()
    out = []
    for i, cluster in enumerate(config.clusters):
        if wanted is not None and cluster.name not in wanted:
            continue
        where = f"clusters[{i}]"
        if not cluster.bootstrap:
            raise ConfigError(f"{where}.bootstrap: the probe needs at least one host:port")
        try:
            bootstrap = tuple(parse_address(a) for a in cluster.bootstrap)
        except ValueError as exc:
            raise ConfigError(f"{where}.bootstrap: {exc}") from None
        rules = book.for_target(cluster.name)
        out.append(Target(name=cluster.name, bootstrap=bootstrap,
                          security=_security(cluster, where, environ),
                          forget_after_ms=rules.forget_after_ms, controller_metrics=tuple(cluster.controller_metrics),
                          session_timeout_ms=rules.session_timeout_ms,
                          heartbeat_interval_ms=rules.heartbeat_interval_ms, stall_after_ms=rules.stall_after_ms,
                          expected_cluster_id=cluster.expected_cluster_id))
    return out
