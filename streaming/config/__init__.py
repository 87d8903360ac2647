"""Configuration (SPEC section 6): one validated YAML file; unknown keys are errors, and so is a
number outside its bounds (every numeric setting has a lower and an upper one, floats are finite).

The rooms, one per section of the file, each with its models and checks:
- `file`: the file itself (`FleetwatchConfig`, `load_config`) and where in it a problem is;
- `rules`: every rule threshold (`rules:`) and a cluster's overrides;
- `fleet`: the watched clusters (`clusters:`), how to reach them, and `RuleBook` (rules per cluster);
- `alerting`: receivers, routes, the notifier's delivery limits and lease, the notifications' links;
- `incidents`: grouping alerts of several clusters, and the kinds of domain they share;
- `probe`: what `fleetwatch probe` may take per target;
- `runtime`: the bus, the store and its retention, Spark and its restarts;
- `secrets`: the checks on secrets read from the environment;
- `bounds`: the bounds every section keeps, and the models' one base.
"""

from __future__ import annotations

from streaming.config.alerting import (
    DEFAULT_DASHBOARD_URL,
    ROUTE_FIELDS,
    AlertingConfig,
    DeliverySettings,
    HttpUrl,
    Receiver,
    Route,
    lease_margin_ms,
    longest_attempt_ms,
)
from streaming.config.bounds import MAX_DAYS, MAX_DURATION_MS, MAX_STATE_TTL_MS
from streaming.config.file import FleetwatchConfig, load_config, yaml_line
from streaming.config.fleet import ClusterConfig, RuleBook, SecurityConfig
from streaming.config.incidents import DOMAIN_KINDS, DomainKind, IncidentSettings
from streaming.config.probe import MIN_QUORUM_INTERVAL_MS, ProbeConfig
from streaming.config.rules import MIN_STALL_AFTER_MS, RuleOverrides, RuleSettings
from streaming.config.runtime import BusConfig, RestartSettings, RetentionConfig, SparkConfig, StoreConfig
from streaming.config.secrets import EXAMPLE_SECRET_PREFIX, refuse_example_secret
from streaming.plumbing.errors import ConfigError

__all__ = [
    "DEFAULT_DASHBOARD_URL",
    "DOMAIN_KINDS",
    "EXAMPLE_SECRET_PREFIX",
    "MAX_DAYS",
    "MAX_DURATION_MS",
    "MAX_STATE_TTL_MS",
    "MIN_QUORUM_INTERVAL_MS",
    "MIN_STALL_AFTER_MS",
    "ROUTE_FIELDS",
    "AlertingConfig",
    "BusConfig",
    "ClusterConfig",
    "ConfigError",
    "DeliverySettings",
    "DomainKind",
    "FleetwatchConfig",
    "HttpUrl",
    "IncidentSettings",
    "ProbeConfig",
    "Receiver",
    "RestartSettings",
    "RetentionConfig",
    "Route",
    "RuleBook",
    "RuleOverrides",
    "RuleSettings",
    "SecurityConfig",
    "SparkConfig",
    "StoreConfig",
    "lease_margin_ms",
    "load_config",
    "longest_attempt_ms",
    "refuse_example_secret",
    "yaml_line",
]
