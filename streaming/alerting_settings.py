"""Parts of the configuration's `alerting:` section (SPEC section 6): a receiver, a route and what a
route may match on, and the links of every notification (issue 43: `dashboard_url`, the dashboard
whose pages the notifications link, and `runbook_base_url`, where the runbook of a rule is). Apart
from streaming/config.py, which has them in `AlertingConfig`, to keep that module within the house's
500 lines; below it in the house's floors."""

from __future__ import annotations

import re
from collections.abc import Sequence
from fnmatch import fnmatchcase
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints
from pydantic_core import InitErrorDetails, PydanticCustomError

from streaming.alert import RULES

__all__ = ["DEFAULT_DASHBOARD_URL", "ROUTE_FIELDS", "HttpUrl", "Receiver", "Route", "route_match_problems"]

DEFAULT_DASHBOARD_URL = "http://127.0.0.1:8050"  # `fleetwatch dashboard`'s own default
_HTTP_URL = re.compile(r"https?://[^\s/?#@]+(/[^\s?#]*)?")


def _http_url(value: str) -> str:
    if not _HTTP_URL.fullmatch(value):
        raise ValueError("must be an http:// or https:// URL with a host, no user info, query or fragment "
                         "(e.g. https://fleetwatch.example.com)")
    return value


# An absolute http(s) URL without user info, query or fragment: a link's base, to which a path is added.
HttpUrl = Annotated[str, StringConstraints(max_length=512), AfterValidator(_http_url)]


class _Strict(BaseModel):
    # As streaming/config.py's: unknown keys are errors, values are never coerced.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Receiver(_Strict):
    name: str
    type: Literal["webhook", "pagerduty", "alertmanager", "slack"]
    # Left out of repr: a URL may be the secret (a Slack incoming webhook's path is).
    url: str | None = Field(None, repr=False)
    url_env: str | None = None
    secret_env: str | None = None
    routing_key_env: str | None = None


class Route(_Strict):
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
