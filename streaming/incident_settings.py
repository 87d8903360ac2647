"""The `incidents:` section of the configuration (SPEC section 6 style: unknown keys and values out
of bounds are errors): how alerts of several clusters are grouped into fleet incidents
(streaming/detect/incidents.py) and how long the notifier holds a firing for its incident.
Apart from streaming/config.py, which has it as `FleetwatchConfig.incidents`, to keep that module
within the house's 500 lines; below it in the house's floors."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["DOMAIN_KIND_NAMES", "IncidentSettings"]

# streaming.detect.domains.DOMAIN_KINDS, named here because the configuration is below detection.
DOMAIN_KIND_NAMES = ("host", "subnet", "rack", "dns_suffix", "tag")


class IncidentSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    # Off: every alert is notified alone, as before; the dashboard and /metrics show no incident.
    enabled: bool = True
    # Members start within this long (event time) of the incident's first alert.
    window_ms: int = Field(60_000, ge=1000, le=3_600_000)
    min_clusters: int = Field(2, ge=2, le=10_000)
    # A domain more than this share of the fleet's clusters is in (or all of them) is no evidence.
    max_domain_share: float = Field(0.67, gt=0, le=1, allow_inf_nan=False)
    # An incident hits at least this share of the clusters in its domain (a coincidence does not).
    min_hit_share: float = Field(0.5, ge=0, le=1, allow_inf_nan=False)
    domains: tuple[Literal["host", "subnet", "rack", "dns_suffix", "tag"], ...] = Field(DOMAIN_KIND_NAMES,
                                                                                         min_length=1)
    # How long the notifier holds the firing of an alert that could join an incident (its subject
    # is in an evidence domain), so that the members reaching the outbox meanwhile go out as one
    # notification. 0: never held (the first member goes out alone, later ones as joiners).
    notify_wait_ms: int = Field(10_000, ge=0, le=300_000)

    @field_validator("domains", mode="before")
    @classmethod
    def _list(cls, value: object) -> object:
        # YAML gives a list; strict mode takes only a tuple for a tuple field.
        return tuple(value) if isinstance(value, list) else value
