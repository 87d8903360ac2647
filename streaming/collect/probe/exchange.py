"""One exchange with one address: a connection, its requests, and what the answers say.

ApiVersions, SASL when configured, the KIP-1242 identity check where the broker offers it,
Metadata, DescribeCluster v2 on a bootstrap, DescribeQuorum on a KRaft broker; every failure is
recorded in the `Answer` (a Metadata answer stands when an optional request fails).
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Executor
from dataclasses import dataclass, replace
from typing import Any

from streaming.collect.probe.targets import Target, format_address
from streaming.collect.protocol.client import DEFAULT_MAX_FRAME, TIMEOUT, Connection, KafkaErrorResponse, ProbeFailure
from streaming.plumbing.errors import FleetwatchError
from streaming.records.contract import MAX_NAME_CHARS, Broker, Expected, MetadataResponse, event_to_dict

__all__ = [
    "DESCRIBE_CLUSTER",
    "DESCRIBE_QUORUM",
    "METADATA_LOG",
    "NO_CONTROLLER",
    "Answer",
    "IdentityCheckUnusable",
    "Quorum",
    "check_identity",
    "converse",
    "describe_cluster",
    "describe_quorum",
    "response_event",
]

log = logging.getLogger(__name__)

METADATA = 3
API_VERSIONS = 18
DESCRIBE_QUORUM = 55
DESCRIBE_CLUSTER = 60
METADATA_LOG = "__cluster_metadata"
NO_CONTROLLER = -1
# Kafka's answers to an ApiVersions v5 it cannot take (UNSUPPORTED_VERSION, INVALID_REQUEST): only
# these turn the KIP-1242 check off for an endpoint, and only for a while (prober.IDENTITY_RETRY_S).
_IDENTITY_REFUSALS = (35, 42)
# A forwarded DescribeQuorum that fails this way means the broker reaches no active controller:
# our own timeout, REQUEST_TIMED_OUT, NOT_LEADER_OR_FOLLOWER, NOT_CONTROLLER.
_QUORUM_UNREACHABLE = (TIMEOUT, "REQUEST_TIMED_OUT", "NOT_LEADER_OR_FOLLOWER", "NOT_CONTROLLER")


@dataclass
class Quorum:
    """One DescribeQuorum answer: the leader, its epoch, and each replica's last fetch (voters and
    observers), on the leader's clock."""

    leader_id: int
    voters: dict[int, tuple[int, int]]  # replica id -> (LastFetchTimestamp, LogEndOffset)
    observers: dict[int, tuple[int, int]]
    leader_epoch: int = -1  # LeaderEpoch: a new one is a new term of a leader, even of the same node

    @property
    def leader_now(self) -> int | None:
        """The leader's clock when it answered, or None when the answer does not tell it.

        Kafka's leader describes its own entry with the current time as LastFetchTimestamp (and
        LastCaughtUpTimestamp): `LeaderState.describeReplicaState`, for the replica matching
        `localReplicaKey`. The leader is a voter (an observer while it is being removed).
        """
        entry = self.voters.get(self.leader_id) or self.observers.get(self.leader_id)
        return entry[0] if entry is not None and entry[0] >= 0 else None


@dataclass
class Answer:
    """What one exchange with one address produced."""

    endpoint: str
    expected: Expected | None
    latency_ms: int = 0
    done_s: float = 0.0  # loop time when it finished
    error: str | None = None
    detail: str = ""
    cluster_id: str | None = None
    controller_id: int | None = None
    controller_known: bool = True
    controller_epoch: int | None = None  # DescribeQuorum's LeaderEpoch, with a leader
    brokers: tuple[Broker, ...] | None = None
    responder_node_id: int | None = None
    kraft: bool = False  # the broker offers DescribeQuorum
    quorum: Quorum | None = None  # None: not asked, or not answered (then the broker's view may be stale)
    # Brokers the answer listed with a host the event contract refuses (over MAX_NAME_CHARS), left
    # out of `brokers` so that the event stands: their addresses, shortened.
    unlisted: tuple[str, ...] = ()


class IdentityCheckUnusable(FleetwatchError):
    """The broker advertises ApiVersions v5 but refused or dropped our identity check."""


async def converse(target: Target, host: str, port: int, deadline: float, answer: Answer, *, client_id: str,
                   bootstrap: bool, identity: Expected | None, connection: type[Connection] = Connection,
                   max_frame: int = DEFAULT_MAX_FRAME, decode_slot: asyncio.Semaphore | None = None,
                   lookup_slot: asyncio.Semaphore | None = None, lookup_pool: Executor | None = None) -> None:
    """One connection: ApiVersions, SASL, [KIP-1242 check], Metadata, [DescribeCluster], [DescribeQuorum].

    `identity`: what the KIP-1242 check asks the broker to confirm (None: no check). An endpoint's
    is its `expected`; a bootstrap's, the pinned identity of its address (prober.py), while its
    event keeps `expected` null unless the broker refuses it. `max_frame` bounds every answer;
    `decode_slot` is the target's turn at decoding big ones off the event loop, `lookup_slot` its
    places for name lookups in `lookup_pool`'s threads (see streaming/collect/protocol/client.py)."""
    conn = connection(host, port, deadline=deadline, client_id=client_id, security=target.security,
                      max_frame=max_frame, decode_slot=decode_slot, lookup_slot=lookup_slot, lookup_pool=lookup_pool)
    try:
        await conn.open()
        await conn.negotiate()
        if target.security.sasl:
            await conn.authenticate()
        verified = await check_identity(conn, identity)
        await _metadata(conn, answer)
        if bootstrap:
            await _describe_cluster(conn, answer, target)
        await _describe_quorum(conn, answer, target)
        answer.responder_node_id = (identity.node_id if verified and identity
                                    else _listed_at(answer.brokers, host, port))
        if answer.kraft and answer.quorum is None and answer.brokers:
            # A broker cut off from the controller serves a stale image: its fenced flags say nothing.
            answer.brokers = tuple(replace(b, fenced=None) for b in answer.brokers)
    finally:
        conn.close()


async def check_identity(conn: Connection, expected: Expected | None) -> bool:
    """KIP-1242 (ApiVersions v5) when the broker offers it and we know what to expect: both ids.
    Kafka 4.4 takes ClusterId and NodeId together or neither (`ApiVersionsRequest.isValid`): a
    ClusterId with NodeId -1 is INVALID_REQUEST (recorded: tests/fixtures/kafka/4.4.0,
    `...-ApiVersions-v5-cluster-without-node`), so a cluster id alone is never sent.

    Sent after SASL: an unauthenticated ApiVersions is answered by the authenticator, which
    does not run the check. REBOOTSTRAP_REQUIRED is the answer; UNSUPPORTED_VERSION or
    INVALID_REQUEST mean the broker cannot take the request (`IdentityCheckUnusable`); any
    other failure (a connection closed during a restart, a timeout) fails this exchange only.
    """
    if (expected is None or not expected.cluster_id or expected.node_id is None
            or conn.supported(API_VERSIONS, 5, 5) is None):
        return False
    try:
        await conn.check_identity(expected.cluster_id, expected.node_id)
    except KafkaErrorResponse as refused:
        if refused.error_code in _IDENTITY_REFUSALS:
            raise IdentityCheckUnusable from refused
        raise
    return True


async def _metadata(conn: Connection, answer: Answer) -> None:
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
    answer.brokers = _listable(answer, [Broker(b["NodeId"], b["Host"], b["Port"], b["Rack"]) for b in body["Brokers"]])


async def describe_cluster(conn: Connection, version: int) -> dict[str, Any]:
    """DescribeCluster at `version` (2: fenced brokers listed too, with their flag): its answer; an error
    code in it raises KafkaErrorResponse. The rounds (below) and the quorum readings (quorum.py) ask it."""
    body = await conn.call("DescribeCluster", version, {
        "IncludeClusterAuthorizedOperations": False, "EndpointType": 1, "IncludeFencedBrokers": True})
    if body["ErrorCode"]:
        raise KafkaErrorResponse("DescribeCluster", body["ErrorCode"], body["ErrorMessage"])
    return body


async def describe_quorum(conn: Connection, version: int) -> dict[str, Any]:
    """DescribeQuorum of the metadata log at `version`: its partition's answer; an error code raises
    KafkaErrorResponse, an answer without the partition ProbeFailure NO_PARTITION. The rounds (below) and
    the quorum readings (quorum.py) ask it."""
    body = await conn.call("DescribeQuorum", version, {
        "Topics": [{"TopicName": METADATA_LOG, "Partitions": [{"PartitionIndex": 0}]}]})
    partition = next((p for t in body["Topics"] if t["TopicName"] == METADATA_LOG
                      for p in t["Partitions"] if p["PartitionIndex"] == 0), None)
    code = body["ErrorCode"] or (partition["ErrorCode"] if partition else 0)
    if code:
        raise KafkaErrorResponse("DescribeQuorum", code)
    if partition is None:
        raise ProbeFailure("NO_PARTITION")
    return partition


async def _describe_cluster(conn: Connection, answer: Answer, target: Target) -> None:
    """DescribeCluster v2 lists fenced brokers too, with their flag (Metadata omits them)."""
    version = conn.supported(DESCRIBE_CLUSTER, 2, 2)
    if version is None:
        return
    try:
        body = await describe_cluster(conn, version)
    except ProbeFailure as failure:
        _optional_failed("DescribeCluster", target, answer, failure)
        return
    answer.brokers = _listable(answer, [Broker(b["BrokerId"], b["Host"], b["Port"], b["Rack"], b["IsFenced"])
                                        for b in body["Brokers"]])


async def _describe_quorum(conn: Connection, answer: Answer, target: Target) -> None:
    """KRaft: the active controller (LeaderId) and, from v1, every replica's last fetch time.

    A broker forwards the request to the active controller. See the package docstring for
    what a failure means for `controller_id`.
    """
    version = conn.supported(DESCRIBE_QUORUM, 0, 2)
    if version is None:
        return
    answer.kraft = True
    try:
        partition = await describe_quorum(conn, version)
    except ProbeFailure as failure:
        _optional_failed("DescribeQuorum", target, answer, failure)
        if failure.code in _QUORUM_UNREACHABLE:
            answer.controller_id = NO_CONTROLLER
        else:
            answer.controller_id, answer.controller_known = None, False
        return
    answer.controller_id = partition["LeaderId"]
    if partition["LeaderId"] >= 0:
        answer.controller_epoch = partition["LeaderEpoch"]

    def fetches(replicas: list[dict[str, Any]]) -> dict[int, tuple[int, int]]:
        return {r["ReplicaId"]: (r["LastFetchTimestamp"], r["LogEndOffset"]) for r in replicas}

    answer.quorum = Quorum(partition["LeaderId"],
                           fetches(partition["CurrentVoters"]) if version >= 1 else {},
                           fetches(partition["Observers"]) if version >= 1 else {},
                           leader_epoch=partition["LeaderEpoch"])


def response_event(answer: Answer, target: str, ts: int, source: str) -> dict[str, Any]:
    """The `metadata_response` event of an exchange, in its wire form; a failed exchange adds its
    `error_detail` (not in the contract; the job ignores it, a reader of the JSONL does not)."""
    event = event_to_dict(MetadataResponse(
        ts=ts, source=source, cluster_id=answer.cluster_id, target=target, endpoint=answer.endpoint,
        expected=answer.expected, responder_node_id=answer.responder_node_id, controller_id=answer.controller_id,
        error=answer.error, latency_ms=answer.latency_ms, brokers=answer.brokers,
        controller_known=answer.controller_known, controller_epoch=answer.controller_epoch))
    if answer.error is not None and answer.detail:
        event["error_detail"] = answer.detail
    return event


def _listable(answer: Answer, brokers: list[Broker]) -> tuple[Broker, ...]:
    """The brokers an event can carry: a host or rack over the contract's MAX_NAME_CHARS would make
    the whole event fail it (quarantined, the round's answer lost), so such a broker is left out
    and named in `answer.unlisted`."""
    def fits(b: Broker) -> bool:
        return len(b.host) <= MAX_NAME_CHARS and (b.rack is None or len(b.rack) <= MAX_NAME_CHARS)

    if all(fits(b) for b in brokers):
        return tuple(brokers)
    answer.unlisted = tuple(f"{format_address(b.host[:60], b.port)} (host or rack over {MAX_NAME_CHARS} characters)"
                            for b in brokers if not fits(b))
    return tuple(b for b in brokers if fits(b))


def _listed_at(brokers: tuple[Broker, ...] | None, host: str, port: int) -> int | None:
    ids = {b.node_id for b in brokers or () if b.port == port and b.host.lower() == host.lower()}
    return ids.pop() if len(ids) == 1 else None


def _optional_failed(api: str, target: Target, answer: Answer, failure: ProbeFailure) -> None:
    log.debug("optional request failed; the Metadata answer stands",
              extra={"api": api, "target": target.name, "endpoint": answer.endpoint, "error": str(failure)})

