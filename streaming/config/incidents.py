"""The `incidents:` section: how alerts of several clusters are grouped into fleet incidents
(streaming/detect/incidents.py) and how long the notifier holds a firing for its incident; and the
kinds of domain an incident's clusters can share (written once: detection takes them from here)."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field, field_validator

from streaming.config.bounds import Strict

__all__ = ["DOMAIN_KINDS", "DomainKind", "IncidentSettings"]

# What two clusters can share (streaming/detect/domains.py finds each). Most specific first: when one
# alert could join incidents of two domains, the more specific kind wins a tie (detect/incidents.py).
DomainKind = Literal["host", "subnet", "rack", "dns_suffix", "tag"]
DOMAIN_KINDS: tuple[DomainKind, ...] = get_args(DomainKind)


class IncidentSettings(Strict):
    # Off: every alert is notified alone, as before; the dashboard and /metrics show no incident.
    enabled: bool = True
    # Members start within this long (event time) of the incident's first alert.
    window_ms: int = Field(60_000, ge=1000, le=3_600_000)
    min_clusters: int = Field(2, ge=2, le=10_000)
    # A domain more than this share of the fleet's clusters is in (or all of them) is no evidence.
    max_domain_share: float = Field(0.67, gt=0, le=1, allow_inf_nan=False)
    # An incident hits at least this share of the clusters in its domain (a coincidence does not).
    min_hit_share: float = Field(0.5, ge=0, le=1, allow_inf_nan=False)
    domains: tuple[DomainKind, ...] = Field(DOMAIN_KINDS, min_length=1)
    # How long the notifier holds the firing of an alert that could join an incident (its subject
    # is in an evidence domain), so that the members reaching the outbox meanwhile go out as one
    # notification. 0: never held (the first member goes out alone, later ones as joiners).
    notify_wait_ms: int = Field(10_000, ge=0, le=300_000)

    @field_validator("domains", mode="before")
    @classmethod
    def _list(cls, value: object) -> object:
        # YAML gives a list; strict mode takes only a tuple for a tuple field.
        return tuple(value) if isinstance(value, list) else value
