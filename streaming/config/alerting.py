"""The `alerting:` section (SPEC section 6): the receivers, the routes and what a route may match on,
the notifier's delivery limits and lease, and the links of every notification (issue 43:
`dashboard_url`, the dashboard whose pages the notifications link, and `runbook_base_url`, where the
runbook of a rule is)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from fnmatch import fnmatchcase
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, StrictInt, StringConstraints, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from streaming.config.bounds import DAY_MS, MAX_DAYS, Strict
from streaming.records.alert import RULES

__all__ = ["DEFAULT_DASHBOARD_URL", "ROUTE_FIELDS", "AlertingConfig", "DeliverySettings", "HttpUrl", "Receiver",
           "Route", "lease_margin_ms", "longest_attempt_ms", "route_match_problems"]

DEFAULT_DASHBOARD_URL = "http://127.0.0.1:8050"  # `fleetwatch dashboard`'s own default
_HTTP_URL = re.compile(r"https?://[^\s/?#@]+(/[^\s?#]*)?")


def _http_url(value: str) -> str:
    if not _HTTP_URL.fullmatch(value):
        raise ValueError("must be an http:// or https:// URL with a host, no user info, query or fragment "
                         "(e.g. https://fleetwatch.example.com)")
    return value


# An absolute http(s) URL without user info, query or fragment: a link's base, to which a path is added.
HttpUrl = Annotated[str, StringConstraints(max_length=512), AfterValidator(_http_url)]


class Receiver(Strict):
    name: str
    type: Literal["webhook", "pagerduty", "alertmanager", "slack"]
    # Left out of repr: a URL may be the secret (a Slack incoming webhook's path is).
    url: str | None = Field(None, repr=False)
    url_env: str | None = None
    secret_env: str | None = None
    routing_key_env: str | None = None


class Route(Strict):
    receiver: str
    match: dict[str, list[str]] = Field(default_factory=dict)


# What a route may match on (streaming/notify/routes.py): the alert object's own fields (SPEC
# section 4; `broker` is `broker_id`), else a tag of a configured cluster. Anything else is a typo
# that would silently drop alerts, so it is an error.
ROUTE_FIELDS = ("rule", "severity", "status", "cluster_id", "target", "broker_id", "broker", "endpoint", "alert_id",
                "summary")
_ROUTE_VALUES = {"severity": ("critical", "warning", "info"), "status": ("firing", "resolved")}


def route_match_problems(routes: Sequence[Route], tag_keys: set[str]) -> list[InitErrorDetails]:
    """Route `match` keys that are neither alert fields nor cluster tags, and patterns that can match
    no value of a field with a fixed set of values (a typo would drop alerts silently)."""
    known = {**_ROUTE_VALUES, "rule": tuple(RULES)}
    problems: list[InitErrorDetails] = []
    for i, route in enumerate(routes):
        for key, patterns in route.match.items():
            loc = ("alerting", "routes", i, "match", key)
            if key not in ROUTE_FIELDS and key not in tag_keys:
                tags = f" ({', '.join(sorted(tag_keys))})" if tag_keys else ""
                problems.append(_route_problem(
                    "unknown_route_key", loc, key, f"unknown key: neither a field of the alert "
                    f"({', '.join(ROUTE_FIELDS)}) nor a tag of a configured cluster{tags}"))
                continue
            for pattern in patterns if key in known else ():
                if not any(fnmatchcase(value, pattern) for value in known[key]):
                    problems.append(_route_problem("unknown_route_value", loc, pattern,
                                                   f"{pattern!r} matches no {key} ({', '.join(known[key])})"))
    return problems


def _route_problem(kind: str, loc: tuple[str | int, ...], value: str, text: str) -> InitErrorDetails:
    return InitErrorDetails(type=PydanticCustomError(kind, "{text}", {"text": text}), loc=loc, input=value)


class DeliverySettings(Strict):
    """The notifier's limits and retention (deploy/README.md, "Delivery policies")."""

    # A notification still failing after this many attempts, or this long after the notifier
    # first planned it, is a dead letter: kept with its reason, no longer blocking its subject.
    dead_letter_attempts: StrictInt = Field(100, ge=1, le=1_000_000)
    dead_letter_age_ms: StrictInt = Field(6 * 3_600_000, gt=0, le=MAX_DAYS * DAY_MS)
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


class AlertingConfig(Strict):
    receivers: list[Receiver] = Field(default_factory=list)
    routes: list[Route] = Field(default_factory=list)
    delivery: DeliverySettings = Field(default_factory=DeliverySettings)
    # What every notification links (issue 43; module docstring): the dashboard's pages, the runbooks.
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
