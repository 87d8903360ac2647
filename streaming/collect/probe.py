"""`fleetwatch probe`: poll real Kafka clusters and publish what they answer (SPEC section 3).

Per target, every `interval_ms` (a *round*):

1. Bootstrap: one connection to a configured bootstrap address (the last one that answered
   first; on failure the next, while the round's timeout lasts): ApiVersions, SASL when
   configured, Metadata at the highest version both sides support, DescribeCluster v2 with
   IncludeFencedBrokers (Kafka 4.0+) for each broker's `fenced` flag, DescribeQuorum (KRaft)
   for the active controller and, from v1, each observer's LastFetchTimestamp. One
   `metadata_response` event with `expected` null per attempt.
2. Endpoints: one connection to every endpoint advertised by a bootstrap answer within the
   last `forget_after_ms` (so a fenced or partitioned broker that still answers is seen), with
   `expected` = the cluster id and node id that advertisement named. Where the broker offers
   ApiVersions v5 (Kafka 4.4+, KIP-1242) the expected identity is sent and a misroute answers
   `REBOOTSTRAP_REQUIRED`; otherwise the event carries the cluster id the endpoint reports.
3. Heartbeats: every exchange also asks DescribeQuorum (a broker forwards it to the active
   controller). Each broker's LastFetchTimestamp (observers, and voters that are brokers: in the
   combined layout every broker is a voter and there are no observers) that moved since the
   last round becomes a `broker_heartbeat` event (`broker_epoch` -1: DescribeQuorum does not
   carry the epoch; the detection rules read a negative epoch as unknown, see
   streaming/detect/README.md). The views of all exchanges of the round are merged, so one
   partitioned broker whose forwarded request times out does not hide everybody's heartbeats.
4. Lifecycle: the bootstrap's DescribeCluster v2 registrations (fenced or not) become
   `broker_state` events when they change: ONLINE, FENCED, and OFFLINE for a broker that is no
   longer registered. Only a bootstrap in touch with the controller (its DescribeQuorum was
   answered) speaks for registrations and fencing; a cut-off broker's view is stale, so its
   `fenced` flags are dropped from the event.

Only versions the broker advertises are sent. Every exchange (connect, TLS, SASL, all
requests) is bounded by `timeout_ms`, exchanges run concurrently up to `concurrency`, and in a
live run a target still busy from the previous tick is skipped, so one dead or slow cluster
never delays the others.

The controller id: in KRaft, Metadata's ControllerId is a random live broker (KIP-590), which
would look like a controller that moves every round (measured on Kafka 4.4). When the broker
offers DescribeQuorum (KRaft), Metadata's ControllerId is never used: DescribeQuorum's LeaderId is
reported (-1 when the quorum has no leader); a DescribeQuorum that times out (the broker cannot
reach an active controller: measured with two of three controllers killed) reports -1; any other
refusal (authorization, version) reports the controller as unknown (`controller_known` false,
`controller_id` null), which the controller rules ignore. Without DescribeQuorum (ZooKeeper-era
brokers) Metadata's ControllerId is the real controller and is reported.

`responder_node_id`: the expected node when ApiVersions v5 confirmed it; otherwise the one node
that the answer itself lists at the address we connected to (null when none or several).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import ssl
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from streaming import topics
from streaming.collect.protocol.client import (
    TIMEOUT,
    Connection,
    KafkaErrorResponse,
    ProbeFailure,
    Security,
    classify,
)
from streaming.config import ClusterConfig, ConfigError, FleetwatchConfig, RuleSettings, load_config

__all__ = [
    "BusPublisher",
    "JsonlWriter",
    "ProbeOptions",
    "Prober",
    "Target",
    "command",
    "configure_parser",
    "format_address",
    "parse_address",
    "targets_from_config",
]

log = logging.getLogger(__name__)

SCHEMA = "fleetwatch.event/v1"
METADATA = 3
API_VERSIONS = 18
DESCRIBE_QUORUM = 55
DESCRIBE_CLUSTER = 60
METADATA_LOG = "__cluster_metadata"
UNKNOWN_EPOCH = -1  # Kafka's "no broker epoch"; DescribeQuorum does not report one
NO_CONTROLLER = -1
REBOOTSTRAP_REQUIRED = "REBOOTSTRAP_REQUIRED"
# Kafka's answers to an ApiVersions v5 it cannot take (UNSUPPORTED_VERSION, INVALID_REQUEST): only
# these turn the KIP-1242 check off for an endpoint, and only for IDENTITY_RETRY_S.
_IDENTITY_REFUSALS = (35, 42)
IDENTITY_RETRY_S = 300.0
# A forwarded DescribeQuorum that fails this way means the broker reaches no active controller:
# our own timeout, REQUEST_TIMED_OUT, NOT_LEADER_OR_FOLLOWER, NOT_CONTROLLER.
_QUORUM_UNREACHABLE = (TIMEOUT, "REQUEST_TIMED_OUT", "NOT_LEADER_OR_FOLLOWER", "NOT_CONTROLLER")
_TOPIC_OF = {"metadata_response": topics.METADATA, "broker_heartbeat": topics.HEARTBEATS,
             "broker_state": topics.BROKER_STATES}


def default_source() -> str:
    return f"probe-{socket.gethostname()}"


@dataclass(frozen=True)
class ProbeOptions:
    interval_ms: int = 5000
    timeout_ms: int = 3000  # one whole exchange with one address: connect, TLS, SASL, requests
    concurrency: int = 256  # exchanges (connections) in flight at once, over all targets
    source: str = field(default_factory=default_source)
    client_id: str = "fleetwatch-probe"

    def __post_init__(self) -> None:
        if self.interval_ms <= 0 or self.timeout_ms <= 0 or self.concurrency <= 0:
            raise ValueError("interval_ms, timeout_ms and concurrency must be positive")


@dataclass(frozen=True)
class Target:
    """One configured cluster, ready to probe."""

    name: str
    bootstrap: tuple[tuple[str, int], ...]
    security: Security = field(default_factory=Security)
    forget_after_ms: int = RuleSettings().forget_after_ms


def parse_address(text: str) -> tuple[str, int]:
    """`host:port` or `[v6]:port` as (host, port)."""
    text = text.strip()
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"not a host:port address: {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _security(cluster: ClusterConfig, where: str, environ: Mapping[str, str]) -> Security:
    sec = cluster.security
    context = None
    if sec.protocol in ("SSL", "SASL_SSL"):
        try:
            context = ssl.create_default_context(cafile=sec.ssl_cafile)
            if sec.ssl_certfile:
                context.load_cert_chain(sec.ssl_certfile, sec.ssl_keyfile)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"{where}.security: cannot load TLS files: {exc}") from None
    username = password = None
    if sec.protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        if sec.sasl_mechanism is None:
            raise ConfigError(f"{where}.security.sasl_mechanism is required for {sec.protocol}")
        missing = []
        for key in ("username_env", "password_env"):
            name = getattr(sec, key)
            if not name:
                missing.append(f"{where}.security.{key} is not set")
            elif name not in environ:
                missing.append(f"environment variable {name} ({where}.security.{key}) is not set")
        if missing:
            raise ConfigError("; ".join(missing))
        username, password = environ[sec.username_env or ""], environ[sec.password_env or ""]
    return Security(protocol=sec.protocol, ssl_context=context, sasl_mechanism=sec.sasl_mechanism,
                    username=username, password=password)


def targets_from_config(config: FleetwatchConfig, *, only: Iterable[str] | None = None,
                        environ: Mapping[str, str] | None = None) -> list[Target]:
    """The configured clusters as probe targets; secrets come from the environment.

    Raises ConfigError (one line) for a missing bootstrap list, a bad address, unreadable TLS
    files, or SASL credentials whose environment variables are not set.
    """
    environ = os.environ if environ is None else environ
    wanted = set(only) if only else None
    names = {c.name for c in config.clusters}
    if wanted and (unknown := sorted(wanted - names)):
        raise ConfigError(f"no configured cluster named {', '.join(unknown)}")
    book = config.rule_book()
    out = []
    for i, cluster in enumerate(config.clusters):
        if wanted is not None and cluster.name not in wanted:
            continue
        where = f"clusters[{i}]"
        if not cluster.bootstrap:
            raise ConfigError(f"{where}.bootstrap: the probe needs at least one host:port")
        try:
            bootstrap = tuple(parse_address(a) for a in cluster.bootstrap)
        except ValueError as exc:
            raise ConfigError(f"{where}.bootstrap: {exc}") from None
        out.append(Target(name=cluster.name, bootstrap=bootstrap,
                          security=_security(cluster, where, environ),
                          forget_after_ms=book.for_target(cluster.name).forget_after_ms))
    return out


@dataclass
class _Quorum:
    """One DescribeQuorum answer: the leader and each replica's last fetch (voters and observers)."""

    leader_id: int
    voters: dict[int, tuple[int, int]]  # replica id -> (LastFetchTimestamp, LogEndOffset)
    observers: dict[int, tuple[int, int]]


@dataclass
class _Answer:
    """What one exchange with one address produced."""

    endpoint: str
    expected: dict[str, Any] | None
    latency_ms: int = 0
    done_s: float = 0.0  # loop time when it finished
    error: str | None = None
    detail: str = ""
    cluster_id: str | None = None
    controller_id: int | None = None
    controller_known: bool = True
    brokers: list[dict[str, Any]] | None = None
    responder_node_id: int | None = None
    kraft: bool = False  # the broker offers DescribeQuorum
    quorum: _Quorum | None = None  # None: not asked, or not answered (then the broker's view may be stale)


@dataclass
class _Advert:
    cluster_id: str | None
    node_id: int
    seen_ms: int


@dataclass
class _TargetState:
    preferred: int = 0  # index of the bootstrap address tried first
    endpoints: dict[str, _Advert] = field(default_factory=dict)
    last_fetch: dict[tuple[str | None, int], int] = field(default_factory=dict)
    registrations: dict[tuple[str | None, int], str] = field(default_factory=dict)  # -> ONLINE | FENCED
    failing: bool | None = None


Emit = Callable[[list[dict[str, Any]]], Any]


class _IdentityCheckUnusable(Exception):
    """The broker advertises ApiVersions v5 but refused or dropped our identity check."""


class Prober:
    """Probes a fixed set of targets round after round; keeps what rounds must remember.

    `probe_round(now_ms)` probes every target once and returns the events (their `ts` is
    `now_ms` plus the time the answer took, so tests can drive event time explicitly);
    `run(emit, stop=...)` is the live loop.
    """

    def __init__(self, targets: Sequence[Target], options: ProbeOptions | None = None) -> None:
        names = [t.name for t in targets]
        if len(set(names)) != len(names):
            raise ValueError("target names must be unique")
        self.targets = list(targets)
        self.options = options or ProbeOptions()
        self._state = {t.name: _TargetState() for t in self.targets}
        # Endpoints whose broker refused ApiVersions v5 with an error answer -> loop time to try again.
        self._no_identity_check: dict[str, float] = {}
        self.events_emitted = 0
        self.rounds = 0

    @property
    def _timeout_s(self) -> float:
        return self.options.timeout_ms / 1000

    def failing_targets(self) -> list[str]:
        return sorted(name for name, st in self._state.items() if st.failing)

    # ------------------------------------------------------------ rounds

    def probe_round(self, now_ms: int | None = None) -> list[dict[str, Any]]:
        """Probe every target once (blocking) and return the events in time order."""
        return asyncio.run(self.probe_round_async(now_ms))

    async def probe_round_async(self, now_ms: int | None = None) -> list[dict[str, Any]]:
        now_ms = _wall_ms() if now_ms is None else now_ms
        loop = asyncio.get_running_loop()
        slots = asyncio.Semaphore(self.options.concurrency)
        started = loop.time()
        per_target = await asyncio.gather(*(self.probe_target(t, now_ms, started, slots) for t in self.targets))
        self.rounds += 1
        events = [ev for evs in per_target for ev in evs]
        events.sort(key=lambda ev: ev["ts"])
        self.events_emitted += len(events)
        return events

    async def run(self, emit: Emit, *, stop: asyncio.Event | None = None, rounds: int | None = None) -> None:
        """The live loop: a tick every `interval_ms`; each target's events are emitted as soon
        as that target is done. A target still busy from the previous tick skips this one.

        `emit` runs in a worker thread (it may block on a Kafka producer); with `rounds` the loop
        stops after that many ticks, once their probes are done.
        """
        stop = stop or asyncio.Event()
        loop = asyncio.get_running_loop()
        slots = asyncio.Semaphore(self.options.concurrency)
        busy: dict[str, asyncio.Task[None]] = {}
        interval = self.options.interval_ms / 1000
        next_tick = loop.time()
        ticks = 0
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="probe-emit") as executor:
            async def probe_and_emit(target: Target, now_ms: int, started: float) -> None:
                try:
                    events = await self.probe_target(target, now_ms, started, slots)
                    if events:
                        await loop.run_in_executor(executor, emit, events)
                        self.events_emitted += len(events)
                except Exception:  # one target's failure must not end the loop
                    log.exception("probing or emitting failed", extra={"target": target.name})

            while not stop.is_set():
                now_ms, started = _wall_ms(), loop.time()
                for target in self.targets:
                    task = busy.get(target.name)
                    if task is not None and not task.done():
                        log.warning("target still busy from the previous tick; skipped",
                                    extra={"target": target.name})
                        continue
                    busy[target.name] = loop.create_task(probe_and_emit(target, now_ms, started))
                self.rounds += 1
                ticks += 1
                if rounds is not None and ticks >= rounds:
                    break
                next_tick = max(next_tick + interval, loop.time())
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), next_tick - loop.time())
            pending = [t for t in busy.values() if not t.done()]
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)

    # ------------------------------------------------------------ one target

    async def probe_target(self, target: Target, now_ms: int, started: float,
                           slots: asyncio.Semaphore) -> list[dict[str, Any]]:
        """One round for one target: bootstrap, then every known endpoint concurrently."""
        loop = asyncio.get_running_loop()
        state = self._state[target.name]
        events: list[dict[str, Any]] = []

        def ts(answer: _Answer) -> int:
            return now_ms + max(0, int((answer.done_s - started) * 1000))

        boot: _Answer | None = None
        count = len(target.bootstrap)
        for attempt in range(count):
            if attempt and loop.time() - started >= self._timeout_s:
                break  # the round's time for bootstrapping is spent
            index = (state.preferred + attempt) % count
            host, port = target.bootstrap[index]
            answer = await self._exchange(target, host, port, None, slots, bootstrap=True)
            events.append(self._metadata_event(target, answer, ts(answer)))
            if answer.error is None:
                boot, state.preferred = answer, index
                break
        if boot is None:
            state.preferred = (state.preferred + 1) % count

        if boot is not None:
            for broker in boot.brokers or ():
                address = format_address(broker["host"], broker["port"])
                state.endpoints[address] = _Advert(boot.cluster_id, broker["node_id"], now_ms)
            if boot.kraft and boot.quorum is None:
                # Cut off from the controller: ask another bootstrap address first next round.
                state.preferred = (state.preferred + 1) % count
        for address, advert in list(state.endpoints.items()):
            if now_ms - advert.seen_ms > target.forget_after_ms:
                del state.endpoints[address]

        probes = []
        for address, advert in state.endpoints.items():
            host, port = parse_address(address)
            expected = {"cluster_id": advert.cluster_id, "node_id": advert.node_id}
            probes.append(self._exchange(target, host, port, expected, slots, bootstrap=False))
        answers = await asyncio.gather(*probes)
        for answer in answers:
            events.append(self._metadata_event(target, answer, ts(answer)))
        if boot is not None:
            events.extend(self._registrations(boot, state, ts(boot)))
            events.extend(self._heartbeats(boot, [boot, *answers], state))
        self._note_health(target, events)
        return events

    def _note_health(self, target: Target, events: list[dict[str, Any]]) -> None:
        responses = [ev for ev in events if ev["type"] == "metadata_response"]
        failing = bool(responses) and all(ev["error"] is not None for ev in responses)
        state = self._state[target.name]
        if state.failing is not None and failing != state.failing:
            if failing:
                errors = sorted({ev["error"] for ev in responses})
                log.warning("target stopped answering", extra={"target": target.name, "errors": errors})
            else:
                log.info("target answers again", extra={"target": target.name})
        state.failing = failing

    async def _exchange(self, target: Target, host: str, port: int, expected: dict[str, Any] | None,
                        slots: asyncio.Semaphore, *, bootstrap: bool) -> _Answer:
        loop = asyncio.get_running_loop()
        answer = _Answer(endpoint=format_address(host, port), expected=expected)
        async with slots:
            begun = loop.time()
            deadline = begun + self._timeout_s
            retry_at = self._no_identity_check.get(answer.endpoint)
            identity = retry_at is None or begun >= retry_at
            try:
                try:
                    await self._converse(target, host, port, deadline, answer, bootstrap=bootstrap, identity=identity)
                except _IdentityCheckUnusable as unusable:
                    # The broker offers ApiVersions v5 but refused our KIP-1242 request with an error
                    # answer: compare the reported cluster id instead, on a new connection, for a while.
                    self._no_identity_check[answer.endpoint] = loop.time() + IDENTITY_RETRY_S
                    log.warning("KIP-1242 identity check refused; comparing cluster ids instead for a while",
                                extra={"target": target.name, "endpoint": answer.endpoint,
                                       "error": str(unusable.__cause__), "retry_in_s": IDENTITY_RETRY_S})
                    answer = _Answer(endpoint=answer.endpoint, expected=expected)
                    await self._converse(target, host, port, deadline, answer, bootstrap=bootstrap, identity=False)
            except ProbeFailure as failure:
                answer.error, answer.detail = failure.code, failure.detail
            except Exception as exc:  # a probe bug must not stop the round
                failure = classify(exc)
                log.warning("unexpected probe failure", exc_info=True,
                            extra={"target": target.name, "endpoint": answer.endpoint})
                answer.error, answer.detail = failure.code, failure.detail
            answer.done_s = loop.time()
            answer.latency_ms = int((answer.done_s - begun) * 1000)
        if answer.error is not None:
            answer.cluster_id = answer.controller_id = answer.brokers = answer.responder_node_id = None
            answer.quorum = None
        return answer

    async def _converse(self, target: Target, host: str, port: int, deadline: float, answer: _Answer, *,
                        bootstrap: bool, identity: bool) -> None:
        """One connection: ApiVersions, SASL, [KIP-1242 check], Metadata, [DescribeCluster], [DescribeQuorum]."""
        conn = Connection(host, port, deadline=deadline, client_id=self.options.client_id, security=target.security)
        try:
            await conn.open()
            await conn.negotiate()
            if target.security.sasl:
                await conn.authenticate()
            verified = identity and await self._check_identity(conn, answer.expected)
            await self._metadata(conn, answer)
            if bootstrap:
                await self._describe_cluster(conn, answer, target)
            await self._describe_quorum(conn, answer, target)
            answer.responder_node_id = (answer.expected["node_id"] if verified and answer.expected
                                        else _listed_at(answer.brokers, host, port))
            if answer.kraft and answer.quorum is None and answer.brokers:
                # A broker cut off from the controller serves a stale image: its fenced flags say nothing.
                answer.brokers = [{k: v for k, v in b.items() if k != "fenced"} for b in answer.brokers]
        finally:
            conn.close()

    @staticmethod
    async def _check_identity(conn: Connection, expected: dict[str, Any] | None) -> bool:
        """KIP-1242 (ApiVersions v5) when the broker offers it and we know what to expect.

        Sent after SASL: an unauthenticated ApiVersions is answered by the authenticator, which
        does not run the check. REBOOTSTRAP_REQUIRED is the answer; UNSUPPORTED_VERSION or
        INVALID_REQUEST mean the broker cannot take the request (`_IdentityCheckUnusable`); any
        other failure (a connection closed during a restart, a timeout) fails this exchange only.
        """
        if (expected is None or not expected.get("cluster_id") or expected.get("node_id") is None
                or conn.supported(API_VERSIONS, 5, 5) is None):
            return False
        try:
            await conn.check_identity(expected["cluster_id"], expected["node_id"])
        except KafkaErrorResponse as refused:
            if refused.error_code in _IDENTITY_REFUSALS:
                raise _IdentityCheckUnusable from refused
            raise
        return True

    @staticmethod
    async def _metadata(conn: Connection, answer: _Answer) -> None:
        # v0 reads an empty topic list as "all topics"; v1+ as "none", which is what we want.
        version = conn.supported(METADATA, 1, 13)
        if version is None:
            raise ProbeFailure("UNSUPPORTED_VERSION", "no Metadata version in common (need v1+)")
        body = await conn.call("Metadata", version, {
            "Topics": [], "AllowAutoTopicCreation": False,
            "IncludeClusterAuthorizedOperations": False, "IncludeTopicAuthorizedOperations": False,
        })
        if body["ErrorCode"]:
            raise KafkaErrorResponse("Metadata", body["ErrorCode"])
        answer.cluster_id = body["ClusterId"] if version >= 2 else None
        answer.controller_id = body["ControllerId"]
        answer.brokers = [_broker(b["NodeId"], b["Host"], b["Port"], b["Rack"]) for b in body["Brokers"]]

    @staticmethod
    async def _describe_cluster(conn: Connection, answer: _Answer, target: Target) -> None:
        """DescribeCluster v2 lists fenced brokers too, with their flag (Metadata omits them)."""
        version = conn.supported(DESCRIBE_CLUSTER, 2, 2)
        if version is None:
            return
        try:
            body = await conn.call("DescribeCluster", version, {
                "IncludeClusterAuthorizedOperations": False, "EndpointType": 1, "IncludeFencedBrokers": True})
        except ProbeFailure as failure:
            _optional_failed("DescribeCluster", target, answer, failure)
            return
        if body["ErrorCode"]:
            _optional_failed("DescribeCluster", target, answer, KafkaErrorResponse(
                "DescribeCluster", body["ErrorCode"], body["ErrorMessage"]))
            return
        answer.brokers = [_broker(b["BrokerId"], b["Host"], b["Port"], b["Rack"], b["IsFenced"])
                          for b in body["Brokers"]]

    @staticmethod
    async def _describe_quorum(conn: Connection, answer: _Answer, target: Target) -> None:
        """KRaft: the active controller (LeaderId) and, from v1, every replica's last fetch time.

        A broker forwards the request to the active controller. See the module docstring for
        what a failure means for `controller_id`.
        """
        version = conn.supported(DESCRIBE_QUORUM, 0, 2)
        if version is None:
            return
        answer.kraft = True
        try:
            body = await conn.call("DescribeQuorum", version, {
                "Topics": [{"TopicName": METADATA_LOG, "Partitions": [{"PartitionIndex": 0}]}]})
            partition = next((p for t in body["Topics"] if t["TopicName"] == METADATA_LOG
                              for p in t["Partitions"] if p["PartitionIndex"] == 0), None)
            code = body["ErrorCode"] or (partition["ErrorCode"] if partition else 0)
            if code or partition is None:
                raise KafkaErrorResponse("DescribeQuorum", code) if code else ProbeFailure("NO_PARTITION")
        except ProbeFailure as failure:
            _optional_failed("DescribeQuorum", target, answer, failure)
            if failure.code in _QUORUM_UNREACHABLE:
                answer.controller_id = NO_CONTROLLER
            else:
                answer.controller_id, answer.controller_known = None, False
            return
        answer.controller_id = partition["LeaderId"]

        def fetches(replicas: list[dict[str, Any]]) -> dict[int, tuple[int, int]]:
            return {r["ReplicaId"]: (r["LastFetchTimestamp"], r["LogEndOffset"]) for r in replicas}

        answer.quorum = _Quorum(partition["LeaderId"],
                                fetches(partition["CurrentVoters"]) if version >= 1 else {},
                                fetches(partition["Observers"]) if version >= 1 else {})

    # ------------------------------------------------------------ events

    def _metadata_event(self, target: Target, answer: _Answer, ts: int) -> dict[str, Any]:
        event: dict[str, Any] = {
            "schema": SCHEMA, "type": "metadata_response", "ts": ts, "source": self.options.source,
            "cluster_id": answer.cluster_id, "target": target.name, "endpoint": answer.endpoint,
            "expected": answer.expected, "responder_node_id": answer.responder_node_id,
            "controller_id": answer.controller_id, "error": answer.error, "latency_ms": answer.latency_ms,
            "brokers": answer.brokers,
        }
        if not answer.controller_known:
            event["controller_known"] = False
        if answer.error is not None and answer.detail:
            event["error_detail"] = answer.detail  # not in the contract; ignored by the job
        return event

    def _heartbeats(self, boot: _Answer, answers: list[_Answer], state: _TargetState) -> list[dict[str, Any]]:
        """New last-fetch times of the cluster's brokers, merged over the round's quorum views."""
        brokers = {b["node_id"] for a in answers if a.cluster_id == boot.cluster_id for b in a.brokers or ()}
        brokers |= {node for (cluster, node) in state.registrations if cluster == boot.cluster_id}
        latest: dict[int, tuple[int, int]] = {}
        for answer in answers:
            if answer.quorum is None or answer.cluster_id != boot.cluster_id:
                continue
            # Observers are brokers; voters are brokers only in the combined layout.
            replicas = {**{r: f for r, f in answer.quorum.voters.items() if r in brokers}, **answer.quorum.observers}
            for replica, fetch in replicas.items():
                if fetch[0] > latest.get(replica, (-1, -1))[0]:
                    latest[replica] = fetch
        out = []
        for replica, (fetched, offset) in sorted(latest.items()):
            key = (boot.cluster_id, replica)
            if fetched < 0 or state.last_fetch.get(key, -1) >= fetched:
                continue  # unknown, or no fetch since the last round: not a new heartbeat
            state.last_fetch[key] = fetched
            event = {
                "schema": SCHEMA, "type": "broker_heartbeat", "ts": fetched, "source": self.options.source,
                "cluster_id": boot.cluster_id, "broker_id": replica, "kind": "heartbeat",
                "broker_epoch": UNKNOWN_EPOCH,
            }
            if offset >= 0:
                event["metadata_offset"] = offset
            out.append(event)
        return out

    def _registrations(self, boot: _Answer, state: _TargetState, ts: int) -> list[dict[str, Any]]:
        """`broker_state` events for the registrations that changed since the last current view.

        Only DescribeCluster v2 (which lists fenced brokers) from a broker in touch with the
        controller is a current view of the registrations; anything else says nothing.
        """
        if boot.quorum is None or not boot.brokers or any("fenced" not in b for b in boot.brokers):
            return []
        now = {(boot.cluster_id, b["node_id"]): "FENCED" if b["fenced"] else "ONLINE" for b in boot.brokers}
        out = []
        gone = [key for key in state.registrations if key[0] == boot.cluster_id and key not in now]
        for key in sorted(now, key=lambda k: k[1]):
            if state.registrations.get(key) != now[key]:
                out.append(self._state_event(ts, key, now[key], state.registrations.get(key)))
        for key in sorted(gone, key=lambda k: k[1]):
            out.append(self._state_event(ts, key, "OFFLINE", state.registrations.pop(key)))
        state.registrations.update(now)
        return out

    def _state_event(self, ts: int, key: tuple[str | None, int], new: str, previous: str | None) -> dict[str, Any]:
        event: dict[str, Any] = {
            "schema": SCHEMA, "type": "broker_state", "ts": ts, "source": self.options.source,
            "cluster_id": key[0], "broker_id": key[1], "state": new,
            "reason": "no longer registered" if new == "OFFLINE" else "DescribeCluster registration",
        }
        if previous is not None:
            event["previous_state"] = previous
        return event


def _broker(node_id: int, host: str, port: int, rack: str | None, fenced: bool | None = None) -> dict[str, Any]:
    broker: dict[str, Any] = {"node_id": node_id, "host": host, "port": port}
    if rack is not None:
        broker["rack"] = rack
    if fenced is not None:
        broker["fenced"] = fenced
    return broker


def _listed_at(brokers: list[dict[str, Any]] | None, host: str, port: int) -> int | None:
    ids = {b["node_id"] for b in brokers or () if b["port"] == port and b["host"].lower() == host.lower()}
    return ids.pop() if len(ids) == 1 else None


def _optional_failed(api: str, target: Target, answer: _Answer, failure: ProbeFailure) -> None:
    log.debug("optional request failed; the Metadata answer stands",
              extra={"api": api, "target": target.name, "endpoint": answer.endpoint, "error": str(failure)})


def _wall_ms() -> int:
    return int(time.time() * 1000)


# ---------------------------------------------------------------- sinks


class JsonlWriter:
    """Events to a JSONL file, one per line, flushed after every batch."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] = self.path.open("w", encoding="utf-8")
        self.written = 0

    def __call__(self, events: list[dict[str, Any]]) -> None:
        self._fh.writelines(json.dumps(ev, separators=(",", ":")) + "\n" for ev in events)
        self._fh.flush()
        self.written += len(events)

    def close(self) -> None:
        self._fh.close()


class BusPublisher:
    """Events to the telemetry topics of a Kafka bus, keyed by cluster id."""

    def __init__(self, bootstrap_servers: str, partitions: int = 1) -> None:
        from kafka import KafkaProducer

        from streaming.bus import ensure_topics

        ensure_topics(bootstrap_servers, (topics.METADATA, topics.HEARTBEATS, topics.BROKER_STATES), partitions)
        self._producer = KafkaProducer(bootstrap_servers=bootstrap_servers, client_id="fleetwatch-probe",
                                       acks=1, linger_ms=20)
        self.sent = 0
        self.failures = 0

    def _failed(self, exc: BaseException) -> None:
        self.failures += 1
        log.warning("publishing an event failed", extra={"error": str(exc)})

    def __call__(self, events: list[dict[str, Any]]) -> None:
        for ev in events:
            value = json.dumps(ev, separators=(",", ":")).encode()
            future = self._producer.send(_TOPIC_OF[ev["type"]], key=(ev["cluster_id"] or "").encode(), value=value)
            future.add_errback(self._failed)
            self.sent += 1

    def close(self) -> None:
        self._producer.flush()
        self._producer.close()


# ---------------------------------------------------------------- CLI


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="config file with the clusters to probe")
    p.add_argument("--once", action="store_true", help="probe every target once, then exit")
    p.add_argument("--rounds", type=_positive, metavar="N", help="stop after N rounds (default: run until Ctrl-C)")
    p.add_argument("--out", metavar="EVENTS.jsonl",
                   help="write the events to this JSONL file instead of publishing them to the bus")
    p.add_argument("--bootstrap-servers", metavar="HOST:PORT",
                   help="the telemetry bus to publish to (default: bus.bootstrap_servers of the config)")
    p.add_argument("--interval-ms", type=_positive, default=5000, help="time between rounds (default 5000)")
    p.add_argument("--timeout-ms", type=_positive, default=3000,
                   help="limit for one exchange with one address: connect, TLS, SASL, requests (default 3000)")
    p.add_argument("--concurrency", type=_positive, default=256,
                   help="connections in flight at once over all targets (default 256)")
    p.add_argument("--target", action="append", metavar="NAME",
                   help="probe only this configured cluster (repeatable)")
    p.add_argument("--source", default=None, help="collector id in the events (default probe-<hostname>)")


def command(args: argparse.Namespace) -> int:
    """`fleetwatch probe`: poll the configured clusters, publish (or write) what they answer."""
    config = load_config(args.config)
    if args.timeout_ms >= args.interval_ms:
        raise ConfigError(f"--timeout-ms ({args.timeout_ms}) must be below --interval-ms ({args.interval_ms})")
    targets = targets_from_config(config, only=args.target)
    if not targets:
        raise ConfigError(f"{args.config}: no clusters to probe (clusters: is empty)")
    options = ProbeOptions(interval_ms=args.interval_ms, timeout_ms=args.timeout_ms,
                           concurrency=args.concurrency, source=args.source or default_source())
    rounds = 1 if args.once else args.rounds
    sink: JsonlWriter | BusPublisher
    if args.out:
        sink, where = JsonlWriter(args.out), args.out
    else:
        bus = args.bootstrap_servers or config.bus.bootstrap_servers
        if bus is None:
            raise ConfigError("no bus to publish to: set bus.bootstrap_servers in the config, "
                              "pass --bootstrap-servers, or write to a file with --out")
        from streaming.bus import BusError

        try:
            sink = BusPublisher(bus, config.bus.partitions)
        except BusError as exc:
            print(f"fleetwatch probe: {exc}", file=sys.stderr)
            return 1
        where = bus
    prober = Prober(targets, options)
    log.info("probe started", extra={"targets": len(targets), "interval_ms": options.interval_ms,
                                     "timeout_ms": options.timeout_ms, "to": where})
    try:
        asyncio.run(_run_until_signalled(prober, sink, rounds))
    finally:
        sink.close()
    failing = prober.failing_targets()
    print(f"fleetwatch probe: {prober.rounds} round(s) over {len(targets)} target(s), "
          f"{prober.events_emitted} events to {where}; failing now: {', '.join(failing) or 'none'}",
          file=sys.stderr)
    return 0


async def _run_until_signalled(prober: Prober, sink: Emit, rounds: int | None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await prober.run(sink, stop=stop, rounds=rounds)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)

