"""The controller's own view (issue 31): each broker's registration state and heartbeat age, read
from the KRaft controllers' Prometheus endpoint (the JMX exporter agent), as `broker_state` and
`broker_heartbeat` events.

What Kafka 4.4's controller exposes (read in kafka-metadata 4.4.0's bytecode, measured on a real
cluster with jmx_prometheus_javaagent 1.0.1, default names):
- `kafka.controller:type=KafkaController,name=BrokerRegistrationState,broker=N`
  (ControllerMetadataMetrics, on every controller, from the metadata image): -1 UNREGISTERED,
  10 FENCED, 20 CONTROLLED_SHUTDOWN, 30 ACTIVE. FENCED wins over CONTROLLED_SHUTDOWN. A broker that
  leads partitions reads 20 from its SIGTERM until the controller lets it go; one that leads none
  goes 30 -> 10 at once (Kafka grants it an immediate shutdown). A finished controlled shutdown
  reads 10: Kafka fences the broker and keeps it registered while it is down.
- `...,name=TimeSinceLastHeartbeatReceivedMs,broker=N` (QuorumControllerMetrics): the active
  controller's now minus the last heartbeat it received from the broker, both on its own clock,
  capped at `broker.session.timeout.ms` (a broker it never heard from reads the cap too). Measured
  with Kafka's defaults: a broker heartbeating every 2 s reads 0-2000; SIGSTOPped, it climbs by the
  second, sticks at 9000 and the broker reads FENCED about a second later.
- `...,name=ActiveControllerCount`: 1 on the active controller. Only its heartbeat ages are
  current (heartbeats go to the active controller), so only its reading is used.
- No broker epoch is exposed: the events carry none (`broker_epoch` null in states, -1, unknown,
  in heartbeats, as the probe's DescribeQuorum heartbeats).

One clock (SPEC section 3, amended 2026-11-26): a heartbeat's `ts` is the probe's receive time
minus the age, an offset on the controller's own clock; the controller's time is never a `ts`.
A reading at the cap is no heartbeat (it says only "at least this old"): an age at or above the
target's `session_timeout_ms`, or the same age in two scrapes in a row (a clock that stopped
counting is the cap).

Deduplicated with the probe's own readings (`LastReadings`, shared): a heartbeat is published only
when it is later than every heartbeat already published for the broker (the DescribeQuorum ones
included) by more than half a heartbeat interval; a state only when it differs from the state
last published for the broker, whoever published it. While a controller view answers, it is the
one source of registrations (DescribeCluster cannot tell STOPPING from ONLINE).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from streaming.plumbing.errors import FleetwatchError
from streaming.records.contract import UNREGISTERED, BrokerHeartbeat, BrokerState, event_to_dict

__all__ = ["ControllerReading", "MetricsUnavailable", "ViewMemory", "parse_metrics", "read_controllers",
           "view_events"]

UNKNOWN_EPOCH = -1
# BrokerRegistrationState's values (org.apache.kafka.controller.metrics.BrokerRegistrationState).
KAFKA_STATES = {30: "ONLINE", 20: "STOPPING", 10: "FENCED", -1: "OFFLINE"}
_PREFIX = "kafka_controller_kafkacontroller_"
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


class MetricsUnavailable(FleetwatchError):
    """A controller's metrics endpoint did not answer usably; the message is one line."""


@dataclass
class ControllerReading:
    """One controller's answer: whether it is active, and per broker its state value and heartbeat age."""

    url: str
    active: bool
    states: dict[int, int] = field(default_factory=dict)
    ages_ms: dict[int, int] = field(default_factory=dict)
    received_ms: int = 0  # on the probe's clock


@dataclass
class ViewMemory:
    """What earlier rounds read of one target's active controller: the last age per broker (a
    repeated age is the cap) and the heartbeat time it implied."""

    ages: dict[int, int] = field(default_factory=dict)
    implied: dict[int, int] = field(default_factory=dict)


def _metric(name: str, labels: dict[str, str]) -> str | None:
    """The controller metric a sample is, lower case: the exporter's default names
    (`kafka_controller_KafkaController_Value{name="X"}`) and the common rule sets' names
    (`kafka_controller_kafkacontroller_x`) alike."""
    lower = name.lower()
    if not lower.startswith(_PREFIX):
        return None
    rest = lower[len(_PREFIX):]
    if rest == "value" and "name" in labels:
        return labels["name"].lower()
    return rest


def parse_metrics(url: str, text: str, received_ms: int) -> ControllerReading:
    """The reading in a Prometheus text exposition (lines that are not samples are skipped)."""
    reading = ControllerReading(url=url, active=False, received_ms=received_ms)
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None:
            continue
        labels = dict(_LABEL.findall(match.group(2) or ""))
        metric = _metric(match.group(1), labels)
        if metric is None:
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        if metric == "activecontrollercount":
            reading.active = value >= 1
            continue
        broker = labels.get("broker", "")
        if not broker.lstrip("-").isdigit() or value != value:  # no broker label, or NaN
            continue
        if metric == "brokerregistrationstate":
            reading.states[int(broker)] = int(value)
        elif metric == "timesincelastheartbeatreceivedms":
            reading.ages_ms[int(broker)] = int(value)
    return reading


async def _get(url: str, timeout_s: float, max_bytes: int) -> str:
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise MetricsUnavailable(f"{url}: only http:// endpoints are read")
    port = parts.port or 80
    path = (parts.path or "/metrics") + (f"?{parts.query}" if parts.query else "")
    reader, writer = await asyncio.wait_for(asyncio.open_connection(parts.hostname, port), timeout_s)
    try:
        # HTTP/1.0: the answer ends at the connection's end, never chunked.
        writer.write(f"GET {path} HTTP/1.0\r\nHost: {parts.hostname}:{port}\r\nAccept: text/plain\r\n\r\n".encode())
        await writer.drain()
        body = await asyncio.wait_for(reader.read(max_bytes + 1), timeout_s)
        while len(body) <= max_bytes:
            more = await asyncio.wait_for(reader.read(max_bytes + 1 - len(body)), timeout_s)
            if not more:
                break
            body += more
    finally:
        writer.close()
    if len(body) > max_bytes:
        raise MetricsUnavailable(f"{url}: answer over {max_bytes} bytes")
    head, _, payload = body.partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].split()
    if len(status) < 2 or status[1] != b"200":
        raise MetricsUnavailable(f"{url}: HTTP status {status[1].decode(errors='replace') if len(status) > 1 else '?'}")
    return payload.decode("utf-8", errors="replace")


async def read_controllers(urls: Sequence[str], timeout_s: float, max_bytes: int,
                           now_ms: Any) -> tuple[ControllerReading | None, list[str]]:
    """Scrape every controller at once: the active controller's reading (None when none answered
    as active), and one line per endpoint that failed. `now_ms()`: the probe's clock."""

    async def one(url: str) -> ControllerReading | str:
        try:
            text = await asyncio.wait_for(_get(url, timeout_s, max_bytes), timeout_s)
            return parse_metrics(url, text, now_ms())
        except MetricsUnavailable as exc:
            return str(exc)
        except (OSError, TimeoutError, ValueError) as exc:
            return f"{url}: {type(exc).__name__} {exc}".strip()

    results = await asyncio.gather(*(one(url) for url in urls))
    readings = [r for r in results if isinstance(r, ControllerReading) and r.active]
    return (readings[0] if readings else None), [r for r in results if isinstance(r, str)]


def view_events(reading: ControllerReading, cluster_id: str | None, seen: Any, memory: ViewMemory, source: str,
                session_timeout_ms: int, heartbeat_interval_ms: int) -> list[dict[str, Any]]:
    """The active controller's reading as events, deduplicated against `seen` (the probe's
    `LastReadings` of the target: registrations and the heartbeats already published)."""
    out: list[dict[str, Any]] = []
    at = reading.received_ms
    now = {(cluster_id, b): KAFKA_STATES.get(v, "OFFLINE") for b, v in reading.states.items()}
    gone = [key for key in seen.registrations if key[0] == cluster_id and key not in now]
    for key in sorted(now, key=lambda k: k[1]):
        previous = seen.registrations.get(key)
        if previous != now[key] and not (previous is None and now[key] == "OFFLINE"):
            out.append(event_to_dict(BrokerState(
                ts=at, source=source, cluster_id=cluster_id, broker_id=key[1], state=now[key],
                previous_state=previous, broker_epoch=None,
                reason=UNREGISTERED if reading.states[key[1]] == -1
                else f"controller registration state {reading.states[key[1]]}")))
    for key in sorted(gone, key=lambda k: k[1]):
        out.append(event_to_dict(BrokerState(
            ts=at, source=source, cluster_id=cluster_id, broker_id=key[1], state="OFFLINE",
            previous_state=seen.registrations.pop(key), broker_epoch=None, reason=UNREGISTERED)))
    seen.registrations.update({k: v for k, v in now.items() if v != "OFFLINE"})
    for key in [k for k, v in now.items() if v == "OFFLINE"]:
        seen.registrations.pop(key, None)

    tolerance = heartbeat_interval_ms // 2
    for broker, age in sorted(reading.ages_ms.items()):
        repeated = memory.ages.get(broker) == age
        memory.ages[broker] = age
        if age < 0 or age >= session_timeout_ms or repeated:
            continue  # at the cap: "at least this old", no heartbeat
        implied = at - age
        if implied <= memory.implied.get(broker, -1) + tolerance:
            continue  # the heartbeat this controller already showed
        memory.implied[broker] = implied
        key = (cluster_id, broker)
        if implied <= seen.last_heartbeat.get(key, -1):
            continue  # the probe already published a later one (a DescribeQuorum fetch)
        seen.last_heartbeat[key] = implied
        out.append(event_to_dict(BrokerHeartbeat(
            ts=implied, source=source, cluster_id=cluster_id, broker_id=broker, kind="heartbeat",
            broker_epoch=UNKNOWN_EPOCH, metadata_offset=None, fenced=None, rack=None, endpoints=None)))
    return out
