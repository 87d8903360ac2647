"""Receiver types: how an alert (or a group of them) becomes one HTTP request.

- `webhook`: the alert object of SPEC section 4 as the body, as stored (keys sorted, compact) with the
  links added (below), with
  `X-Fleetwatch-Alert-Id` (the alert id, SPEC section 6), `X-Fleetwatch-Status` (`firing` or
  `resolved`), `X-Fleetwatch-Delivery-Id` (`<alert_id>:<status>`) and `X-Fleetwatch-Signature:
  t=<unix s>,v1=<hex HMAC-SHA256 of "<t>.<body>">,v2=<hex HMAC-SHA256 of "<t>\n<delivery id>\n<body>">`
  keyed by the secret in `secret_env` (unsigned, with a warning, when no `secret_env` is set). v1 is
  SPEC section 6's and covers the body only: the other headers are not signed, so a receiver
  deduplicates on what the verified body says (alert_id and status), or on the delivery id once v2
  has verified it (issue 42.8: a replayed firing whose Delivery-Id header said `:resolved` made a
  receiver that trusted the header drop the real resolution). A receiver that knows v1 only ignores v2.
- `slack`: an incoming-webhook message (`text` in Slack mrkdwn); accepts groups.
- A fleet incident (streaming/notify/incidents.py) goes to a `webhook` as one `fleetwatch.incident/v1`
  object (`INCIDENT_SCHEMA`: the incident, every member's id, its `delivery_id` (`<incident_id>:firing:
  <digest of the ids of the alerts it tells>`) and the alert objects of the members this notification
  is the first to tell, under `alerts`), with `X-Fleetwatch-Incident-Id`, `X-Fleetwatch-Alert-Ids`
  and that `X-Fleetwatch-Delivery-Id`, signed like an alert; to `slack` as one message listing them.
- `pagerduty`: Events API v2, `dedup_key` = alert_id (of the stall it escalates, if any), `trigger` / `resolve`; the key
  comes from `routing_key_env`; `url` overrides the public endpoint. A fleet incident's members are
  one PagerDuty alert, `dedup_key` = `fleet-incident:<incident_id>`: its trigger, a joiner's
  trigger, a member's resolve (`MemberResolved`: an update while others sent under it still fire,
  `resolve` after the last), as pagerduty_events.py says.
- `alertmanager`: POST `<url>/api/v2/alerts`, labels `alertname`, `rule`, `cluster_id`,
  `target`, `broker`, `severity` (and `endpoint`), `startsAt`/`endsAt`; accepts groups.
  A firing alert is sent with `endsAt` = now + `ALERTMANAGER_FIRING_TTL_MS` and re-sent while it
  stays open (the notifier refreshes it), the way Prometheus does; a resolved one with its `ends_at`.
  A fleet incident's member also has `fleet_incident` = its id and `failure_domain` =
  `<kind>:<value>`, from the firing through every refresh to its resolve (the incident its firing
  was delivered under, `OutgoingAlert.incident`: labels are an Alertmanager alert's identity).

Links (issue 43; `links.py`): every notification says where to read on. A webhook's alert object
gains `runbook_url` (its rule's runbook) and `dashboard_url` (its page on the dashboard), each alert of
an incident's object too, and the incident its own `dashboard_url`; Slack's lines link both; PagerDuty's
triggers carry them as `links`; Alertmanager's alerts as the annotations `runbook_url` and
`dashboard_url` (beside `cluster_name`, `broker_host` and `rack`; `cluster_name` is also a label).

A receiver's URL is shown (logs, errors) as `scheme://host:port/***`: its path and query may be the
secret (a Slack incoming webhook's path is), its user info is. Every part of it is also scrubbed
from error texts.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar
from urllib.parse import parse_qsl, urlsplit

from streaming.config import AlertingConfig, ConfigError
from streaming.config import Receiver as ReceiverConfig
from streaming.detect import FleetIncident
from streaming.notify.links import Links
from streaming.notify.pagerduty_events import alert_event, incident_trigger, member_resolved
from streaming.notify.wording import headline, impact_text
from streaming.plumbing.clock import iso_ms
from streaming.plumbing.redact import redact_url
from streaming.records.alert import Alert

__all__ = [
    "ALERTMANAGER_FIRING_TTL_MS",
    "INCIDENT_SCHEMA",
    "PAGERDUTY_EVENTS_URL",
    "SIGNATURE_TOLERANCE_S",
    "AlertmanagerReceiver",
    "HttpRequest",
    "IncidentNotice",
    "IncidentTag",
    "MemberResolved",
    "OutgoingAlert",
    "PagerDutyReceiver",
    "Receiver",
    "SlackReceiver",
    "WebhookReceiver",
    "build_receivers",
    "sign",
    "verify_signature",
]

log = logging.getLogger(__name__)

PAGERDUTY_EVENTS_URL = "https://events.pagerduty.com/v2/enqueue"
ALERTMANAGER_FIRING_TTL_MS = 10 * 60 * 1000
USER_AGENT = "fleetwatch-notify/1"
_SLACK_ICON = {"critical": ":red_circle:", "warning": ":large_orange_circle:", "info": ":large_blue_circle:"}
SLACK_GROUP_MAX = 50
INCIDENT_SCHEMA = "fleetwatch.incident/v1"


@dataclass(frozen=True)
class IncidentTag:
    """The fleet incident a firing was delivered under: its id and domain (`<kind>:<value>`)."""

    incident_id: str
    domain: str

    @classmethod
    def of(cls, incident: FleetIncident) -> IncidentTag:
        return cls(incident.incident_id, str(incident.domain))


@dataclass(frozen=True)
class OutgoingAlert:
    """One (alert_id, status) to deliver: its alert, and the alert object as the outbox stored it
    (what a webhook and PagerDuty's custom details carry), both as the store read them once;
    `incident`, the fleet incident its firing was delivered under, for the receivers whose alert
    identity names it (Alertmanager's labels, PagerDuty's dedup key)."""

    alert: Alert
    stored: Mapping[str, Any]
    incident: IncidentTag | None = None


@dataclass(frozen=True)
class MemberResolved:
    """A member's resolve at PagerDuty, whose firing went under the incident `tag`: the alerts
    delivered under that incident that still fire (none: the incident resolves)."""

    tag: IncidentTag
    still_firing: tuple[Alert, ...]


# What a unit of the delivery queue tells of a fleet incident: its firing members, or one's resolve.
IncidentNotice = FleetIncident | MemberResolved


@dataclass
class HttpRequest:
    url: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    method: str = "POST"


def _mac(key: bytes, t: int | str, body: bytes, delivery_id: str | None) -> str:
    """v1: the HMAC of "<t>.<body>"; v2 (a delivery id given): of "<t>\n<delivery id>\n<body>" (a
    header value holds no line break, so the three parts cannot be split another way)."""
    signed = f"{t}.".encode() if delivery_id is None else f"{t}\n{delivery_id}\n".encode()
    return hmac.new(key, signed + body, hashlib.sha256).hexdigest()


def sign(secret: str, body: bytes, t: int, delivery_id: str | None = None) -> str:
    """The `X-Fleetwatch-Signature` value for a body sent at unix time t: `t=..,v1=..`, and `,v2=..`
    covering `delivery_id` too when one is given."""
    data = body.encode() if isinstance(body, str) else body
    header = f"t={t},v1={_mac(secret.encode(), t, data, None)}"
    return header if delivery_id is None else f"{header},v2={_mac(secret.encode(), t, data, delivery_id)}"


# How old (or how far ahead) a signature's timestamp may be: older is a replay.
SIGNATURE_TOLERANCE_S = 300
_SIGNATURE_PART = re.compile(r"t=([0-9]{1,12})|v([12])=([0-9a-f]{1,128})", re.ASCII)


def verify_signature(secret: str | bytes, body: bytes | str, header: object, *, now: float | None = None,
                     tolerance_s: float = SIGNATURE_TOLERANCE_S, delivery_id: str | None = None) -> bool:
    """What a receiver does: True only when `header` is a well-formed `X-Fleetwatch-Signature` whose
    timestamp is within `tolerance_s` of `now` (default: the wall clock) and one of whose `v1`
    values is the HMAC of "<t>.<body>"; given the request's `delivery_id` (its
    X-Fleetwatch-Delivery-Id), one of whose `v2` values is the HMAC of "<t>\n<delivery id>\n<body>"
    instead, so that a delivery id altered in transit (a replay) is refused. Anything else
    (malformed, non-ASCII, not a string) is False."""
    if not tolerance_s > 0:
        raise ValueError("tolerance_s must be positive: a signature without a time limit can be replayed forever")
    if isinstance(header, bytes):
        try:
            header = header.decode("ascii")
        except UnicodeDecodeError:
            return False
    if not isinstance(header, str) or not header.isascii():
        return False
    if delivery_id is not None and (not isinstance(delivery_id, str) or not delivery_id.isascii()
                                    or "\n" in delivery_id or "\r" in delivery_id):
        return False
    stamp, macs = None, {"1": [], "2": []}
    for part in header.split(","):
        found = _SIGNATURE_PART.fullmatch(part.strip())
        if found is None:
            return False
        if found[1] is not None:
            if stamp is not None:
                return False
            stamp = int(found[1])
        else:
            macs[found[2]].append(found[3])
    wanted = macs["1" if delivery_id is None else "2"]
    if stamp is None or not wanted:
        return False
    if abs((time.time() if now is None else now) - stamp) > tolerance_s:
        return False
    key = secret.encode() if isinstance(secret, str) else secret
    expected = _mac(key, stamp, body.encode() if isinstance(body, str) else body, delivery_id)
    return any(hmac.compare_digest(expected, mac) for mac in wanted)


def _firing(notice: IncidentNotice) -> FleetIncident:
    if not isinstance(notice, FleetIncident):
        raise TypeError("this receiver is told of an incident's firing members only")
    return notice


def _json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _json_sorted(obj: Any) -> bytes:
    """As the store writes an alert object (`Alert.stored_body`): compact, keys sorted."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


class Receiver:
    """A configured receiver, with its secrets resolved from the environment."""

    kind: ClassVar[str] = ""
    accepts_groups: ClassVar[bool] = False
    accepts_incidents: ClassVar[bool] = False  # one notification for a fleet incident's members
    # Its alert identity names the incident a firing went under (resolves and refreshes keep it).
    names_incidents: ClassVar[bool] = False
    resolves_incidents: ClassVar[bool] = False  # a member's resolve is about the incident (MemberResolved)

    def __init__(self, config: ReceiverConfig, env: Mapping[str, str], links: Links | None = None) -> None:
        self.name = config.name
        self.config = config
        self.links = links or Links()
        self.secrets: list[str] = []
        self.url = self._resolve_url(config, env)
        self.display = self._display(config)

    # -- configuration ---------------------------------------------------------------------

    def _problem(self, text: str) -> ConfigError:
        return ConfigError(f"alerting receiver {self.name!r} ({self.kind}): {text}")

    def _env(self, env: Mapping[str, str], var: str, what: str) -> str:
        value = env.get(var)
        if not value:
            raise self._problem(f"{what} is read from ${var}, which is not set")
        self.secrets.append(value)
        return value

    def _default_url(self) -> str | None:
        return None

    def _resolve_url(self, config: ReceiverConfig, env: Mapping[str, str]) -> str:
        if config.url and config.url_env:
            raise self._problem("give url or url_env, not both")
        url = self._env(env, config.url_env, "the URL") if config.url_env else config.url or self._default_url()
        if not url:
            raise self._problem("needs url or url_env")
        try:
            parts = urlsplit(url)
            port_ok = parts.port is None or parts.port > 0
        except ValueError:
            parts, port_ok = None, False
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
            shown = f"${config.url_env}" if config.url_env else redact_url(url)
            raise self._problem(f"not an http(s) URL: {shown}")
        # Any part of the URL but its scheme and host may be the secret: keep them out of error texts.
        self.secrets.append(url)
        for secret in (parts.password, parts.path if parts.path != "/" else None, parts.query,
                       *(v for _, v in parse_qsl(parts.query, keep_blank_values=True))):
            if secret:
                self.secrets.append(secret)
        return url

    def _display(self, config: ReceiverConfig) -> str:
        shown = redact_url(self.url)
        return f"{shown} (from ${config.url_env})" if config.url_env else shown

    def describe(self) -> str:
        return f"{self.name} ({self.kind} {self.display})"

    # -- requests ----------------------------------------------------------------------------

    def request(self, items: Sequence[OutgoingAlert], now_ms: int) -> HttpRequest:
        raise NotImplementedError

    def incident_request(self, incident: IncidentNotice, items: Sequence[OutgoingAlert], now_ms: int) -> HttpRequest:
        """One request for the members `items` of a fleet incident (firings; with `resolves_incidents`
        also a member's resolve, `MemberResolved`)."""
        raise NotImplementedError

    def _post(self, body: bytes, headers: Mapping[str, str] | None = None) -> HttpRequest:
        """A JSON POST of `body` to the receiver's URL, with `headers` beside the common ones."""
        return HttpRequest(self.url, body, {"Content-Type": "application/json", "User-Agent": USER_AGENT,
                                            **(headers or {})})


class WebhookReceiver(Receiver):
    kind = "webhook"
    accepts_incidents = True

    def __init__(self, config: ReceiverConfig, env: Mapping[str, str], links: Links | None = None) -> None:
        super().__init__(config, env, links)
        self.secret = self._env(env, config.secret_env, "the signing secret") if config.secret_env else None
        if self.secret is None:
            log.warning("webhook receiver has no secret_env: its requests are not signed",
                        extra={"receiver": self.name})

    def request(self, items: Sequence[OutgoingAlert], now_ms: int) -> HttpRequest:
        (item,) = items
        body = _json_sorted(self._linked(item))
        alert_id, status = str(item.alert.alert_id), str(item.alert.status)
        return self._signed(body, {"X-Fleetwatch-Alert-Id": alert_id, "X-Fleetwatch-Status": status,
                                   "X-Fleetwatch-Delivery-Id": f"{alert_id}:{status}"}, now_ms)

    def incident_request(self, notice: IncidentNotice, items: Sequence[OutgoingAlert], now_ms: int) -> HttpRequest:
        incident = _firing(notice).to_dict()
        ids = sorted(str(item.alert.alert_id) for item in items)
        digest = hashlib.sha256(",".join(ids).encode()).hexdigest()[:16]
        delivery_id = f"{incident['incident_id']}:firing:{digest}"
        # The delivery id in the (signed) body too: what a receiver deduplicates an incident on.
        body = _json({"schema": INCIDENT_SCHEMA, **incident, "delivery_id": delivery_id,
                      "dashboard_url": self.links.incident_page(str(incident["incident_id"])),
                      "alerts": [self._linked(item) for item in items]})
        return self._signed(body, {"X-Fleetwatch-Incident-Id": str(incident["incident_id"]),
                                   "X-Fleetwatch-Status": "firing", "X-Fleetwatch-Alert-Ids": ",".join(ids),
                                   "X-Fleetwatch-Delivery-Id": delivery_id}, now_ms)

    def _linked(self, item: OutgoingAlert) -> dict[str, Any]:
        """The stored alert object with its links (`runbook_url`, `dashboard_url`)."""
        return {**item.stored, **self.links.of_alert(item.alert)}

    def _signed(self, body: bytes, headers: Mapping[str, str], now_ms: int) -> HttpRequest:
        """A JSON POST of `body` with `headers`, signed when the receiver has a secret: v1 over the
        body, v2 over its X-Fleetwatch-Delivery-Id and the body."""
        if self.secret is not None:
            signature = sign(self.secret, body, now_ms // 1000, headers["X-Fleetwatch-Delivery-Id"])
            headers = {**headers, "X-Fleetwatch-Signature": signature}
        return self._post(body, headers)


class SlackReceiver(Receiver):
    kind = "slack"
    accepts_groups = True
    accepts_incidents = True

    @staticmethod
    def _escape(text: str) -> str:
        # Slack's mrkdwn: these three are control characters in message text.
        return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")

    def _line(self, alert: Alert) -> str:
        icon = ":white_check_mark:" if alert.status == "resolved" else _SLACK_ICON.get(alert.severity, "")
        impact = impact_text(alert)
        links = (f"<{self.links.runbook(alert.rule)}|runbook> · "
                 f"<{self.links.alert_page(alert.alert_id)}|dashboard>")
        return (f"{icon} *[{alert.status.upper()}]* {alert.severity} `{alert.rule}` "
                f"{self._escape(headline(alert))} (alert {alert.alert_id}) {links}"
                + (f"\n> blast radius: {self._escape(impact)}" if impact else "")).strip()

    def request(self, items: Sequence[OutgoingAlert], now_ms: int) -> HttpRequest:
        alerts = [item.alert for item in items]
        if len(alerts) == 1:
            text = self._line(alerts[0])
        else:
            firing = sum(a.status == "firing" for a in alerts)
            counts = ", ".join(f"{n} {what}" for n, what in ((firing, "firing"), (len(alerts) - firing, "resolved"))
                               if n)
            first = alerts[0]
            cluster = first.cluster_name or first.target or first.cluster_id or first.endpoint
            text = "\n".join([f"*{len(alerts)} fleetwatch alerts for {self._escape(str(cluster))}* ({counts})",
                              *(f"• {self._line(a)}" for a in alerts)])
        return self._message(text)

    def incident_request(self, notice: IncidentNotice, items: Sequence[OutgoingAlert], now_ms: int) -> HttpRequest:
        incident = _firing(notice).to_dict()
        domain = incident["domain"]
        text = "\n".join([f":rotating_light: *fleet incident: {len(incident['clusters'])} clusters share "
                          f"{domain['kind']} {self._escape(str(domain['value']))}* ({len(incident['member_ids'])} "
                          f"alerts; incident {incident['incident_id']}) "
                          f"<{self.links.incident_page(str(incident['incident_id']))}|dashboard>",
                          *(f"• {self._line(item.alert)}" for item in items)])
        return self._message(text)

    def _message(self, text: str) -> HttpRequest:
        payload = {"text": text, "username": "fleetwatch", "mrkdwn": True}
        return self._post(_json(payload))


class PagerDutyReceiver(Receiver):
    kind = "pagerduty"
    accepts_incidents = names_incidents = resolves_incidents = True

    def __init__(self, config: ReceiverConfig, env: Mapping[str, str], links: Links | None = None) -> None:
        super().__init__(config, env, links)
        if not config.routing_key_env:
            raise self._problem("needs routing_key_env (the Events API v2 integration key)")
        self.routing_key = self._env(env, config.routing_key_env, "the routing key")

    def _default_url(self) -> str | None:
        return PAGERDUTY_EVENTS_URL

    def request(self, items: Sequence[OutgoingAlert], now_ms: int) -> HttpRequest:
        (item,) = items
        return self._event(alert_event(item.alert, self.routing_key, self.links, item.stored))

    def incident_request(self, incident: IncidentNotice, items: Sequence[OutgoingAlert], now_ms: int) -> HttpRequest:
        if isinstance(incident, MemberResolved):
            (item,) = items
            return self._event(member_resolved(incident.tag.incident_id, incident.tag.domain, item.alert,
                                               incident.still_firing, self.routing_key, self.links))
        return self._event(incident_trigger(incident, [item.alert for item in items], self.routing_key, self.links))

    def _event(self, event: dict[str, Any]) -> HttpRequest:
        return self._post(_json(event))


class AlertmanagerReceiver(Receiver):
    kind = "alertmanager"
    accepts_groups = accepts_incidents = names_incidents = True

    def _resolve_url(self, config: ReceiverConfig, env: Mapping[str, str]) -> str:
        url = super()._resolve_url(config, env).rstrip("/")
        return url if url.endswith("/api/v2/alerts") else url + "/api/v2/alerts"

    @staticmethod
    def labels(alert: Alert, incident: IncidentTag | None = None) -> dict[str, str]:
        """An alert's identity at Alertmanager: the same for its firing, its refreshes and its resolve."""
        labels = {"alertname": alert.rule, "rule": alert.rule, "severity": alert.severity,
                  "cluster_id": alert.cluster_id, "cluster_name": alert.cluster_name, "target": alert.target,
                  "broker": None if alert.broker_id is None else str(alert.broker_id),
                  "endpoint": alert.endpoint, "fleet_incident": incident and incident.incident_id,
                  "failure_domain": incident and incident.domain}
        return {k: str(v) for k, v in labels.items() if v not in (None, "")}

    def alert_entry(self, alert: Alert, now_ms: int, incident: IncidentTag | None = None) -> dict[str, Any]:
        """The alert as Alertmanager's API takes it. Its true start is the annotation `starts_at`.

        `startsAt` is that start, but for a firing member of a fleet incident: now. Alertmanager
        flushes a new group at once when an alert in it started more than the route's group_wait
        ago, and may do so before it has taken the next alert of the same request: the members of
        one incident, posted together, then made two notifications (measured against the shipped
        route: 8 incidents of 200, two members each, started a minute before they were posted).
        Posted with startsAt now, the group waits its group_wait and holds every member posted with
        the first; Alertmanager keeps the earliest startsAt it was told (the first post's), so a
        refresh does not move it, and one that comes before the group's first flush does not cut
        its wait short."""
        true_start = min(int(alert.starts_at), now_ms)
        starts = now_ms if incident is not None and alert.status == "firing" else true_start
        if alert.status == "resolved":
            # Never in the future (clock skew would keep it firing), never before the start.
            ends = max(true_start, min(int(alert.ends_at or now_ms), now_ms))
        else:
            ends = now_ms + ALERTMANAGER_FIRING_TTL_MS
        annotations = {"summary": str(alert.summary or ""), "alert_id": str(alert.alert_id),
                       "starts_at": iso_ms(int(alert.starts_at)),
                       "details": json.dumps(alert.details or {}, sort_keys=True),
                       "runbook_url": self.links.runbook(alert.rule),
                       "dashboard_url": self.links.alert_page(alert.alert_id),
                       "broker_host": alert.broker_host, "rack": alert.rack,
                       "tags": json.dumps(alert.tags, sort_keys=True) if alert.tags else None}
        return {"labels": self.labels(alert, incident),
                "annotations": {k: str(v) for k, v in annotations.items() if v is not None},
                "startsAt": iso_ms(starts), "endsAt": iso_ms(ends)}

    def request(self, items: Sequence[OutgoingAlert], now_ms: int) -> HttpRequest:
        payload = [self.alert_entry(item.alert, now_ms, item.incident) for item in items]
        return self._post(_json(payload))

    def incident_request(self, notice: IncidentNotice, items: Sequence[OutgoingAlert], now_ms: int) -> HttpRequest:
        tag = IncidentTag.of(_firing(notice))
        return self.request([replace(item, incident=tag) for item in items], now_ms)


_TYPES: dict[str, type[Receiver]] = {cls.kind: cls for cls in
                                     (WebhookReceiver, SlackReceiver, PagerDutyReceiver, AlertmanagerReceiver)}


def build_receivers(configs: Sequence[ReceiverConfig], env: Mapping[str, str] | None = None,
                    alerting: AlertingConfig | None = None) -> dict[str, Receiver]:
    """The configured receivers by name, each linking what `alerting` says (its `dashboard_url` and
    `runbook_base_url`; their defaults without it); a missing secret or URL is a ConfigError (one line)."""
    env = os.environ if env is None else env
    links = Links.of(alerting or AlertingConfig())
    out: dict[str, Receiver] = {}
    for config in configs:
        if config.name in out:
            raise ConfigError(f"alerting receiver {config.name!r} is defined twice")
        out[config.name] = _TYPES[config.type](config, env, links)
    return out
