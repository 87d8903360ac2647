"""Configuration (SPEC section 6): one validated YAML file; unknown keys are errors, and so is a
number outside its bounds (every numeric setting has a lower and an upper one, floats are finite).
A problem is told in one line, each with its file, line and path (`file:line: path: message`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StringConstraints,
    ValidationError,
    model_validator,
)
from pydantic_core import InitErrorDetails

from streaming.alerting_settings import DEFAULT_DASHBOARD_URL, HttpUrl, Receiver, Route, route_match_problems
from streaming.contract import DEFAULT_MAX_CLOCK_SKEW_MS, DEFAULT_MAX_SOURCE_LEAD_MS
from streaming.errors import ConfigError
from streaming.incident_settings import IncidentSettings
from streaming.probe_settings import ProbeConfig

__all__ = [
    "AlertingConfig",
    "BusConfig",
    "ClusterConfig",
    "ConfigError",
    "DeliverySettings",
    "FleetwatchConfig",
    "ProbeConfig",
    "Receiver",
    "RestartSettings",
    "RetentionConfig",
    "Route",
    "RuleBook",
    "RuleOverrides",
    "RuleSettings",
    "SparkConfig",
    "StoreConfig",
    "lease_margin_ms",
    "load_config",
    "longest_attempt_ms",
    "yaml_line",
]


# Upper bounds of the numeric settings (issue 27.2): past them a value is a typo or a unit mistake,
# and near 2**63 it overflows once added to a timestamp (Spark's timers, the store's int64 columns,
# Python's datetime). Every numeric key has one; `check-config` and every command name the key.
_DAY_MS = 86_400_000
MAX_DURATION_MS = 30 * _DAY_MS  # every rule window, timeout and grace, the lateness and the clock skew
MAX_STATE_TTL_MS = 365 * _DAY_MS  # rules.state_ttl_ms: longer than every window, at most a year
MAX_FLAP_THRESHOLD = 10_000
MAX_DAYS = 3650  # retention, in days: ten years


# broker.stalled (issue 44): how old a broker's last fetch from the KRaft leader is, in one reading, when it
# warns. A healthy broker fetches at least every 500 ms (the leader's fetch wait): under 1000 ms a healthy
# broker would warn; 0 turns the rule off.
MIN_STALL_AFTER_MS = 1000


def _stall_after(value: int | None) -> int | None:
    if value is not None and 0 < value < MIN_STALL_AFTER_MS:
        raise ValueError(f"must be 0 (off) or at least {MIN_STALL_AFTER_MS}: a healthy broker fetches every 500 ms")
    return value


StallAfter = Annotated[int, Field(ge=0, le=MAX_DURATION_MS), AfterValidator(_stall_after)]


class _Strict(BaseModel):
    # strict: a wrong type is an error, never coerced (`session_timeout_ms: true` would be 1 ms).
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class RuleSettings(_Strict):
    """Every rule threshold of SPEC section 4, with its default."""

    allowed_lateness_ms: int = Field(5000, ge=0, le=MAX_DURATION_MS)
    # How far ahead of the wall clock an event time may be (SPEC section 3): later ones are
    # quarantined (ts_out_of_range), so one bad clock cannot move the watermark. The job's, not a cluster's.
    max_clock_skew_ms: int = Field(DEFAULT_MAX_CLOCK_SKEW_MS, ge=0, le=MAX_DURATION_MS)
    # How far ahead of the job's clock (the micro-batch's timestamp) an accepted event time may be (issue 26; SPEC
    # section 3, amended 2026-11-26): later ones are quarantined (ts_ahead_of_clock). An accepted
    # lead moves the watermark that far ahead and eats as much of allowed_lateness_ms, so it stays
    # well under it (streaming/detect/README.md, "Input bounds"). The job's, not a cluster's.
    max_source_lead_ms: int = Field(DEFAULT_MAX_SOURCE_LEAD_MS, ge=0, le=MAX_DURATION_MS)
    session_timeout_ms: int = Field(9000, gt=0, le=MAX_DURATION_MS)
    # broker.heartbeat_late (issue 31): a warning once a broker's heartbeat is this share of
    # session_timeout_ms old, before the controller fences it. Off (None) unless set: the SPEC's
    # worked examples and the simulator's ground truth predate it.
    heartbeat_late_ratio: float | None = Field(None, ge=0.1, le=0.95, allow_inf_nan=False)
    # broker.stalled (issue 44): a warning at a quorum reading that shows a broker's last fetch from the
    # active controller this old (`MIN_STALL_AFTER_MS` up; 0: off). Kafka fences it 7-9 s after it stops.
    stall_after_ms: StallAfter = 2500
    # Kafka's broker.heartbeat.interval.ms: an answer this long after the last heartbeat shows a
    # broker that serves clients but missed a heartbeat (broker.partitioned, streaming/detect/README.md).
    heartbeat_interval_ms: int = Field(2000, gt=0, le=MAX_DURATION_MS)
    fenced_grace_ms: int = Field(30000, ge=0, le=MAX_DURATION_MS)
    partition_window_ms: int = Field(15000, gt=0, le=MAX_DURATION_MS)
    stopping_timeout_ms: int = Field(120000, gt=0, le=MAX_DURATION_MS)
    resolve_after_ms: int = Field(60000, gt=0, le=MAX_DURATION_MS)
    flap_threshold: int = Field(4, ge=2, le=MAX_FLAP_THRESHOLD)
    flap_window_ms: int = Field(300000, gt=0, le=MAX_DURATION_MS)
    controller_window_ms: int = Field(15000, gt=0, le=MAX_DURATION_MS)
    controller_flap_threshold: int = Field(3, ge=2, le=MAX_FLAP_THRESHOLD)
    controller_flap_window_ms: int = Field(300000, gt=0, le=MAX_DURATION_MS)
    disagreement_ms: int = Field(30000, gt=0, le=MAX_DURATION_MS)
    unreachable_ms: int = Field(30000, gt=0, le=MAX_DURATION_MS)
    forget_after_ms: int = Field(600000, gt=0, le=MAX_DURATION_MS)
    # How long detection keeps what it is no longer told about (streaming/detect/forgetting.py).
    state_ttl_ms: int = Field(86_400_000, gt=0, le=MAX_STATE_TTL_MS)

    @property
    def heartbeat_late_ms(self) -> int | None:
        """How old a heartbeat is when broker.heartbeat_late fires (None: the rule is off)."""
        return None if self.heartbeat_late_ratio is None else int(self.heartbeat_late_ratio * self.session_timeout_ms)


class RuleOverrides(_Strict):
    """Per-cluster overrides: any field of RuleSettings but the watermark's lateness, the clock
    skew, the source lead and the state TTL (all four are the job's, not a cluster's)."""

    session_timeout_ms: int | None = Field(None, gt=0, le=MAX_DURATION_MS)
    heartbeat_late_ratio: float | None = Field(None, ge=0.1, le=0.95, allow_inf_nan=False)
    stall_after_ms: StallAfter | None = None
    heartbeat_interval_ms: int | None = Field(None, gt=0, le=MAX_DURATION_MS)
    fenced_grace_ms: int | None = Field(None, ge=0, le=MAX_DURATION_MS)
    partition_window_ms: int | None = Field(None, gt=0, le=MAX_DURATION_MS)
    stopping_timeout_ms: int | None = Field(None, gt=0, le=MAX_DURATION_MS)
    resolve_after_ms: int | None = Field(None, gt=0, le=MAX_DURATION_MS)
    flap_threshold: int | None = Field(None, ge=2, le=MAX_FLAP_THRESHOLD)
    flap_window_ms: int | None = Field(None, gt=0, le=MAX_DURATION_MS)
    controller_window_ms: int | None = Field(None, gt=0, le=MAX_DURATION_MS)
    controller_flap_threshold: int | None = Field(None, ge=2, le=MAX_FLAP_THRESHOLD)
    controller_flap_window_ms: int | None = Field(None, gt=0, le=MAX_DURATION_MS)
    disagreement_ms: int | None = Field(None, gt=0, le=MAX_DURATION_MS)
    unreachable_ms: int | None = Field(None, gt=0, le=MAX_DURATION_MS)
    forget_after_ms: int | None = Field(None, gt=0, le=MAX_DURATION_MS)


class SecurityConfig(_Strict):
    protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    username_env: str | None = None
    password_env: str | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    # SASL PLAIN over a plaintext connection sends the password as it is to whatever answers at
    # the address (a misrouted one too): only with this explicit yes.
    allow_cleartext_password: bool = False

    @model_validator(mode="after")
    def _no_cleartext_password(self) -> SecurityConfig:
        if (self.protocol == "SASL_PLAINTEXT" and self.sasl_mechanism == "PLAIN"
                and not self.allow_cleartext_password):
            raise ValueError("SASL PLAIN over SASL_PLAINTEXT sends the password in clear text: use SASL_SSL or a "
                             "SCRAM mechanism, or set allow_cleartext_password: true")
        return self


class ClusterConfig(_Strict):
    name: str = Field(min_length=1)
    bootstrap: list[str] = Field(default_factory=list)
    expected_cluster_id: str | None = Field(None, pattern=r"^[A-Za-z0-9_-]+$")
    tags: dict[str, str] = Field(default_factory=dict)
    rules: RuleOverrides = Field(default_factory=RuleOverrides)
    security: SecurityConfig = Field(default_factory=SecurityConfig)
    # The KRaft controllers' Prometheus endpoints (the JMX exporter agent), read by the probe for the
    # controller's own view of each broker (streaming/collect/probe/controller_view.py).
    controller_metrics: list[Annotated[str, StringConstraints(pattern=r"^http://[^\s/]+(/\S*)?$",
                                                              max_length=512)]] = Field(
        default_factory=list, max_length=16)


class DeliverySettings(_Strict):
    """The notifier's limits and retention (deploy/README.md, "Delivery policies")."""

    # A notification still failing after this many attempts, or this long after the notifier
    # first planned it, is a dead letter: kept with its reason, no longer blocking its subject.
    dead_letter_attempts: StrictInt = Field(100, ge=1, le=1_000_000)
    dead_letter_age_ms: StrictInt = Field(6 * 3_600_000, gt=0, le=MAX_DAYS * _DAY_MS)
    # Finished notifications of resolved alerts, and ended silences, are deleted after this long.
    retention_days: StrictInt = Field(14, ge=1, le=MAX_DAYS)
    # One delivery attempt, all of it (connect, send, status, headers, the first 16 KiB of the body),
    # ends by this deadline: a receiver that trickles its answer fails the attempt (retried, and
    # counted by the limits above). An attempt starts only while the notifier's lease covers its
    # whole deadline, so it is at most `longest_attempt_ms(lease_ms)` (15 s for the 30 s lease).
    attempt_timeout_ms: StrictInt = Field(10_000, ge=1000, le=15_000)
    # The notifier's lease (streaming/notify/lease.py): one notifier sends; a standby takes over a
    # dead sender on another host once this long has passed without a renewal.
    lease_ms: StrictInt = Field(30_000, ge=6_000, le=600_000)

    @model_validator(mode="after")
    def _attempt_within_lease(self) -> DeliverySettings:
        if self.attempt_timeout_ms > longest_attempt_ms(self.lease_ms):
            raise ValueError(f"attempt_timeout_ms {self.attempt_timeout_ms} is longer than a {self.lease_ms} ms "
                             f"lease allows an attempt ({longest_attempt_ms(self.lease_ms)} ms): an attempt "
                             "must end while the lease is held")
        return self


def lease_margin_ms(lease_ms: int) -> int:
    """How long before the lease could run out its holder stops sending (should renewing fail)."""
    return min(5000, lease_ms // 3)


def longest_attempt_ms(lease_ms: int) -> int:
    """The longest delivery attempt a lease of `lease_ms` lets start at any time: the holder renews
    every third of the lease and sends until `lease_margin_ms` before it runs out."""
    return lease_ms - lease_ms // 3 - lease_margin_ms(lease_ms)


class AlertingConfig(_Strict):
    receivers: list[Receiver] = Field(default_factory=list)
    routes: list[Route] = Field(default_factory=list)
    delivery: DeliverySettings = Field(default_factory=DeliverySettings)
    # What every notification links (issue 43; alerting_settings.py): the dashboard's pages, the runbooks.
    dashboard_url: HttpUrl = DEFAULT_DASHBOARD_URL
    runbook_base_url: HttpUrl | None = None  # default: the dashboard's own, <dashboard_url>/runbooks

    @model_validator(mode="after")
    def _routes_name_receivers(self) -> AlertingConfig:
        names = {r.name for r in self.receivers}
        for i, route in enumerate(self.routes):
            if route.receiver not in names:
                raise ValueError(f"routes[{i}].receiver {route.receiver!r} is not a configured receiver")
        return self

    def match_problems(self, tag_keys: set[str]) -> list[InitErrorDetails]:
        """Route `match` keys that are neither alert fields nor cluster tags, and patterns that can
        match no value of a field with a fixed set of values (a typo would drop alerts silently)."""
        return route_match_problems(self.routes, tag_keys)


class BusConfig(_Strict):
    # None: the embedded Tansu broker, started by the project.
    bootstrap_servers: str | None = None
    partitions: int = Field(1, ge=1, le=10_000)
    # How every fleetwatch client reaches the bus (job, probe, simulator, alert publisher).
    security: SecurityConfig = Field(default_factory=SecurityConfig)
    # Which source reads the bus: Spark's kafka connector (`spark`, the production path), the
    # project's Python reader (`python`), or `auto`: the connector for a configured bus when it
    # is on the classpath and the bus answers ListOffsets(LATEST) with the high watermark (checked
    # by behaviour, streaming/bus/listoffsets.py), else the Python reader. A checkpoint keeps the
    # source it was started with (streaming/source/telemetry.py). A Tansu bus (the embedded
    # broker's, or configured by address) is read by `python`: Spark's source trusts Tansu's wrong
    # ListOffsets answers, so `spark` on such a bus is refused.
    source: Literal["auto", "spark", "python"] = "auto"
    # Spark's source only: stop the query when the bus deleted records the job had not read yet
    # (retention outran a stopped job). False: log it and go on, as the Python reader does.
    fail_on_data_loss: bool = False


class RetentionConfig(_Strict):
    """Days the job keeps what it writes (deploy/README.md, "Retention"; finite, at most MAX_DAYS: `.inf` overflowed
    the cutoff), deleted every `every_batches` batches, `max_rows_per_table` per table; the quarantine's bounds."""

    history_days: float = Field(30, gt=0, le=MAX_DAYS, allow_inf_nan=False)  # alert_history, transitions, controller
    resolved_alerts_days: float = Field(30, gt=0, le=MAX_DAYS, allow_inf_nan=False)  # alerts once resolved
    quarantine_days: float = Field(7, gt=0, le=MAX_DAYS, allow_inf_nan=False)
    progress_days: float = Field(2, gt=0, le=MAX_DAYS, allow_inf_nan=False)  # pipeline_progress: ~86k rows a day
    subjects_days: float = Field(30, gt=0, le=MAX_DAYS, allow_inf_nan=False)  # subjects (and sources) not heard of
    every_batches: int = Field(100, ge=1, le=1_000_000)
    max_rows_per_table: int = Field(5000, ge=1, le=10_000_000)
    quarantine_rows_per_reason: int = Field(100, ge=1, le=100_000)  # of a micro-batch; the rest counted (issue 42)
    quarantine_max_rows: int = Field(50_000, ge=100, le=100_000_000)  # the oldest go beyond (store/quarantine_bounds)


class StoreConfig(_Strict):
    url: str = Field("sqlite:///var/fleetwatch.db", repr=False)  # left out of repr: it may hold a password
    retention: RetentionConfig = Field(default_factory=RetentionConfig)


class RestartSettings(_Strict):
    """How `fleetwatch run` restarts its streaming query when it fails (streaming/job/supervise.py):
    from its checkpoint, in the same Spark session, after a delay that doubles from `first_delay_ms`
    up to `max_delay_ms` and starts over once the query ran `healthy_after_ms` without failing.
    `give_up_after` failures within `give_up_window_ms` end `run` with exit 1, for the process's
    own supervisor (Kubernetes, systemd) to start it afresh."""

    first_delay_ms: StrictInt = Field(1000, gt=0, le=MAX_DURATION_MS)
    max_delay_ms: StrictInt = Field(60_000, gt=0, le=MAX_DURATION_MS)
    healthy_after_ms: StrictInt = Field(300_000, gt=0, le=MAX_DURATION_MS)
    give_up_after: StrictInt = Field(10, ge=1, le=10_000)
    give_up_window_ms: StrictInt = Field(600_000, gt=0, le=MAX_DURATION_MS)
    # A query whose micro-batch runs this long, or whose execution thread died without failing it
    # (a JVM Error such as StackOverflowError is not caught by Spark), is stuck: it is stopped and
    # restarted as a failed one. Longer than the slowest first batch of a backlog.
    stalled_after_ms: StrictInt = Field(600_000, ge=10_000, le=MAX_DURATION_MS)

    @model_validator(mode="after")
    def _delays_grow(self) -> RestartSettings:
        if self.max_delay_ms < self.first_delay_ms:
            raise ValueError(f"max_delay_ms ({self.max_delay_ms}) must be at least first_delay_ms "
                             f"({self.first_delay_ms})")
        return self


class SparkConfig(_Strict):
    master: str = "local[*]"
    checkpoint_dir: str = "var/checkpoint"
    trigger_ms: int = Field(1000, ge=0, le=3_600_000)
    # Tasks of each detection pass: one per core (on a cluster, the executors' total cores).
    shuffle_partitions: int = Field(2, ge=1, le=10_000)
    max_records_per_batch: int = Field(200000, gt=0, le=100_000_000)
    # Detection state is kept per bucket of shards, in each pass (see streaming/pipeline/state.py): each
    # bucket costs a fixed ~10 ms per micro-batch, and buckets bound the detection's parallelism
    # (give a cluster a few per core). Fixed for the life of a checkpoint: the job refuses state
    # written with another count.
    state_buckets: int = Field(16, ge=1, le=4096)
    # JVM options of the Spark driver (the JVM fleetwatch starts itself, or submit.sh's spark-submit)
    # and of the executors on a cluster ("": the JVM's defaults). The JIT stops at its first tier:
    # the JVMs only move rows between Kafka, Arrow and the Python workers; C2's compiling was 42% of
    # the driver's CPU in a replay (bench/replay_vs_reference.py: 22.7 -> 13.1 CPU s) and most of
    # the executors' on a standalone cluster (tests/ops/test_deploy_standalone.py), throughput unchanged.
    driver_java_options: str = "-XX:TieredStopAtLevel=1"
    executor_java_options: str = "-XX:TieredStopAtLevel=1"
    restarts: RestartSettings = Field(default_factory=RestartSettings)


class FleetwatchConfig(_Strict):
    bus: BusConfig = Field(default_factory=BusConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    rules: RuleSettings = Field(default_factory=RuleSettings)
    clusters: list[ClusterConfig] = Field(default_factory=list)
    alerting: AlertingConfig = Field(default_factory=AlertingConfig)
    spark: SparkConfig = Field(default_factory=SparkConfig)
    probe: ProbeConfig = Field(default_factory=ProbeConfig)
    incidents: IncidentSettings = Field(default_factory=IncidentSettings)  # streaming/incident_settings.py

    @model_validator(mode="after")
    def _unique_names(self) -> FleetwatchConfig:
        seen: set[str] = set()
        for i, cluster in enumerate(self.clusters):
            if cluster.name in seen:
                raise ValueError(f"clusters[{i}].name {cluster.name!r} is used twice")
            seen.add(cluster.name)
        return self

    @model_validator(mode="after")
    def _routes_match_what_alerts_have(self) -> FleetwatchConfig:
        problems = self.alerting.match_problems({key for cluster in self.clusters for key in cluster.tags})
        if problems:
            raise ValidationError.from_exception_data(type(self).__name__, problems)
        return self

    @model_validator(mode="after")
    def _lead_within_clock_skew(self) -> FleetwatchConfig:
        # Beyond max_clock_skew_ms a `ts` is out of range whatever the lead bound says.
        rules = self.rules
        if rules.max_source_lead_ms > rules.max_clock_skew_ms:
            raise ValueError(f"rules.max_source_lead_ms must be at most rules.max_clock_skew_ms "
                             f"({rules.max_source_lead_ms} > {rules.max_clock_skew_ms})")
        return self

    @model_validator(mode="after")
    def _state_outlives_every_window(self) -> FleetwatchConfig:
        # Forgetting a quiet subject must never cut one of its rules' windows short.
        windows = [(f"rules.{name}", value) for name, value in self.rules.model_dump().items()
                   if name.endswith("_ms")
                   and name not in ("state_ttl_ms", "max_clock_skew_ms", "max_source_lead_ms")]
        windows += [(f"clusters[{i}].rules.{name}", value)
                    for i, cluster in enumerate(self.clusters)
                    for name, value in cluster.rules.model_dump(exclude_none=True).items() if name.endswith("_ms")]
        where, longest = max(windows, key=lambda w: w[1])
        if self.rules.state_ttl_ms <= longest:
            raise ValueError(f"rules.state_ttl_ms must be longer than every rule window ({self.rules.state_ttl_ms} "
                             f"is not longer than the longest, {where} = {longest})")
        return self

    def rule_book(self) -> RuleBook:
        return RuleBook(self.rules, self.clusters)


class RuleBook:
    """Rule settings resolved per cluster: global settings, then the cluster's overrides; and the
    configured clusters themselves, whose names and tags every alert carries (`configured`).

    A cluster is found by its target name, or by cluster id through `expected_cluster_id`.
    Plain data, so it pickles into Spark's Python workers.
    """

    def __init__(self, defaults: RuleSettings | None = None,
                 clusters: list[ClusterConfig] | None = None) -> None:
        self.defaults = defaults or RuleSettings()
        self._by_target: dict[str, RuleSettings] = {}
        self._by_cluster_id: dict[str, RuleSettings] = {}
        self.pinned_ids: dict[str, str] = {}
        self._configured_by_name: dict[str, ClusterConfig] = {}
        self._configured_by_id: dict[str, ClusterConfig] = {}
        for cluster in clusters or []:
            overrides = cluster.rules.model_dump(exclude_none=True)
            settings = self.defaults.model_copy(update=overrides) if overrides else self.defaults
            self._by_target[cluster.name] = settings
            self._configured_by_name[cluster.name] = cluster
            if cluster.expected_cluster_id:
                self._by_cluster_id[cluster.expected_cluster_id] = settings
                self.pinned_ids[cluster.name] = cluster.expected_cluster_id
                self._configured_by_id[cluster.expected_cluster_id] = cluster

    @property
    def shortest_session_timeout_ms(self) -> int:
        return min([self.defaults.session_timeout_ms, *(s.session_timeout_ms for s in self._by_target.values())])

    def for_target(self, target: str | None) -> RuleSettings:
        return self._by_target.get(target or "", self.defaults)

    def for_cluster(self, cluster_id: str | None, target: str | None = None) -> RuleSettings:
        """By pinned cluster id first; else by the target name its responses carry."""
        found = self._by_cluster_id.get(cluster_id or "")
        return found if found is not None else self.for_target(target)

    def configured(self, cluster_id: str | None, target: str | None = None) -> ClusterConfig | None:
        """The configured cluster, found as `for_cluster` finds its settings: by pinned cluster id
        first, else by target name; None when the config names neither."""
        found = self._configured_by_id.get(cluster_id or "")
        return found if found is not None else self._configured_by_name.get(target or "")


def yaml_line(root: yaml.Node | None, loc: Sequence[Any]) -> int | None:
    """1-based line of the deepest node of `loc` (keys and list indexes) found in the YAML tree;
    None when not even its first part is there (or `loc` is empty: a problem of the whole file)."""
    node, line = root, None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            found = next(((key, value) for key, value in node.value
                          if isinstance(key, yaml.ScalarNode) and key.value == str(part)), None)
            if found is None:
                return line
            node, line = found[1], found[0].start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def _describe(exc: ValidationError, path: Path, text: str = "") -> str:
    """One line: each problem as `file:line: path: message` (the line where the YAML has it)."""
    try:
        root = yaml.compose(text) if text else None
    except yaml.YAMLError:
        root = None
    problems = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        message = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        line = yaml_line(root, err["loc"])
        problems.append(f"{path}:{line}: {where}: {message}" if line else f"{path}: {where}: {message}")
    return "; ".join(problems)


def load_config(path: str | Path | None) -> FleetwatchConfig:
    """Load and validate a config file; None gives the embedded defaults."""
    if path is None:
        return FleetwatchConfig()
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        raw: Any = yaml.safe_load(text)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark else ""
        raise ConfigError(f"{path}: not valid YAML{where}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping")
    try:
        return FleetwatchConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, path, text)) from None
