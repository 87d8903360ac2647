"""The watched fleet (`clusters:`): each cluster's name, bootstrap, pinned id, tags, rule overrides and
how to reach it (`security`, also the bus's); and `RuleBook`, the rules resolved per cluster."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints, model_validator

from streaming.config.bounds import Strict
from streaming.config.rules import RuleOverrides, RuleSettings

__all__ = ["ClusterConfig", "RuleBook", "SecurityConfig"]


class SecurityConfig(Strict):
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


class ClusterConfig(Strict):
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
