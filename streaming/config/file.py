"""The configuration file (SPEC section 6): one validated YAML file whose sections are the modules of
this package; a problem is told in one line, each with its file, line and path
(`file:line: path: message`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError, model_validator

from streaming.config.alerting import AlertingConfig
from streaming.config.bounds import Strict
from streaming.config.fleet import ClusterConfig, RuleBook
from streaming.config.incidents import IncidentSettings
from streaming.config.probe import ProbeConfig
from streaming.config.rules import RuleSettings
from streaming.config.runtime import BusConfig, SparkConfig, StoreConfig
from streaming.plumbing.errors import ConfigError

__all__ = ["FleetwatchConfig", "load_config", "yaml_line"]


class FleetwatchConfig(Strict):
    bus: BusConfig = Field(default_factory=BusConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    rules: RuleSettings = Field(default_factory=RuleSettings)
    clusters: list[ClusterConfig] = Field(default_factory=list)
    alerting: AlertingConfig = Field(default_factory=AlertingConfig)
    spark: SparkConfig = Field(default_factory=SparkConfig)
    probe: ProbeConfig = Field(default_factory=ProbeConfig)
    incidents: IncidentSettings = Field(default_factory=IncidentSettings)  # streaming/config/incidents.py

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
