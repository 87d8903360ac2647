"""The fast quorum reading (issue 44; streaming/detect/README.md, "Before Kafka knows: quorum readings"):
each cluster's KRaft quorum every `quorum_interval_ms` (1 s), apart from the rounds, as one
`quorum_reading` event (streaming/records/quorum.py).

A healthy broker fetches the metadata log from the KRaft leader at least every 500 ms. One reading is two
requests on one connection per cluster, kept open between readings (no connect, ApiVersions or SASL per
reading), to the bootstrap address where the cluster last answered:
- DescribeQuorum v1+ (forwarded to the active controller): the leader, its epoch, and every replica's
  LastFetchTimestamp and LastCaughtUpTimestamp; the leader lists itself with its own now, so each fetch's
  age is the leader's now minus the moment the broker's last fetch reached it (`_stamps`), both on the
  leader's clock, and the event's `ts` is the probe's receive time (SPEC section 3's one clock: a remote
  time is never a `ts`);
- DescribeCluster v2 with fenced brokers: each broker's registration, and the cluster id, which must be
  the target's (an address that leads elsewhere gives no reading).
A broker is a quorum observer, a voter that DescribeCluster (or the rounds) lists as a broker (the
combined layout), or a registered broker the quorum does not list (its age unknown). A reading that fails
(a timeout, an error, no leader, another cluster) publishes nothing and closes the connection; one
through the next bootstrap address follows at once (once a tick). Each reading is bounded by the
exchange timeout and by its interval, whichever is shorter. Failing and answering again are logged once
each. Readings take none of the rounds' slots (`target_concurrency`, `concurrency`): one connection per
target, one reading at a time, so a round's slow exchanges never delay a reading (name lookups and big
answers still use the target's threads).

A reading that shows a broker unfenced whose fetch will be `stall_after_ms` old (the target's rule) before
the next reading is followed by one at that moment (`FOLLOW_UP_MARGIN_MS` after it, counted from the
first reading's answer, not from its publishing): the stall is shown when it happens, not up to an
interval later (a frozen broker warned 0.5 s sooner on average, 1 s at worst). It costs a request only
while a broker is stalling.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from streaming.collect.probe.exchange import DESCRIBE_CLUSTER, DESCRIBE_QUORUM, describe_cluster, describe_quorum
from streaming.collect.probe.kraft_readings import LastReadings, fetch_time
from streaming.collect.probe.targets import ProbeOptions, Target, format_address
from streaming.collect.protocol.client import Connection, KafkaErrorResponse, ProbeFailure, classify
from streaming.plumbing import clock
from streaming.records.contract import QuorumReading, event_to_dict

__all__ = ["DESCRIBE_QUORUM", "FOLLOW_UP_MARGIN_MS", "QuorumLink", "QuorumReader", "TargetView", "follow_up_in",
           "reading_of"]

log = logging.getLogger(__name__)

_AGE_MAX = 2**31 - 1  # the contract's bound on a fetch age (about 25 days)
# A follow-up reading comes this long after a fetch would reach the stall age. The follow-up's answer comes
# after the first's by at least the wait, so its age (its `ts` minus the fetch's one time, `reading_of`) is
# at least the first's plus the wait; this covers the two whole-ms truncations of `ts`.
FOLLOW_UP_MARGIN_MS = 5
# The longest a KRaft leader holds a fetch with nothing new before it answers (`KafkaRaftClient.
# MAX_FETCH_WAIT_MS`, not configurable).
_HELD_FETCH_MAX_MS = 500


@dataclass(frozen=True)
class TargetView:
    """What the rounds know of a target that a reading needs: the cluster its last bootstrap reached, the
    bootstrap address tried first, the node ids its rounds know as brokers, and the times they gave each
    broker's fetches (one fetch, one time: kraft_readings.fetch_time)."""

    cluster_id: str | None
    preferred: int
    brokers: frozenset[int]
    seen: LastReadings


@dataclass
class QuorumLink:
    """A target's connection for its readings, kept open between them."""

    index: int | None = None  # the bootstrap address in use
    conn: Connection | None = None
    failing: bool = False
    answered: float = 0.0  # when the last reading's DescribeQuorum answer came (the event loop's clock)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.conn = None


def reading_of(quorum: dict[str, Any], registered: dict[int, bool] | None, brokers: frozenset[int], seen: LastReadings,
               *, ts: int, source: str, cluster_id: str, target: str) -> dict[str, Any] | None:
    """The `quorum_reading` event of one DescribeQuorum partition answer (`quorum`) and the registrations
    DescribeCluster listed (node id -> fenced; None: not read), or None when it shows no leader with its
    own time. `brokers`: node ids known as brokers besides the registrations (a voter that is one). A fetch
    already given a time (`seen`) keeps it: its age is `ts` minus that time."""
    leader = quorum["LeaderId"]
    voters = {r["ReplicaId"]: _stamps(r) for r in quorum["CurrentVoters"]}
    observers = {r["ReplicaId"]: _stamps(r) for r in quorum["Observers"]}
    leader_now = voters.get(leader, observers.get(leader, (-1, -1)))[0]
    if leader < 0 or leader_now < 0:
        return None
    known = brokers | set(registered or ())
    fetched = {**{r: f for r, f in voters.items() if r in known}, **observers}
    fetches = []
    for node in sorted(set(fetched) | set(registered or ())):
        last, asked = fetched.get(node, (-1, -1))
        at = None if last < 0 else fetch_time(seen, (cluster_id, node), (quorum["LeaderEpoch"], last),
                                              ts - max(0, leader_now - last)) - (last - asked)
        age = None if at is None else min(max(0, ts - at), _AGE_MAX)
        fetches.append((node, age, None if registered is None else registered.get(node)))
    return event_to_dict(QuorumReading(ts, source, cluster_id, target, leader, quorum["LeaderEpoch"],
                                       tuple(fetches)))


def _stamps(replica: dict[str, Any]) -> tuple[int, int]:
    """(LastFetchTimestamp, when the replica's last fetch reached the leader), on the leader's clock.

    Kafka's leader stamps LastFetchTimestamp when a fetch arrives, holds a fetch with nothing new for the
    broker up to `_HELD_FETCH_MAX_MS`, and stamps it again when a record completes it: a broker that stopped
    while its fetch was held is stamped after it stopped (measured: 14-396 ms after a SIGSTOP, in 7 of 8).
    LastCaughtUpTimestamp keeps the arrival of a fetch that came caught up (the answer sets it to the
    previous stamp, the arrival; `LeaderState.ReplicaState.updateFollowerState`), so where it lies within a
    hold of the last stamp it is when the broker last asked; else (a broker catching up, or -1) the last
    stamp is all there is."""
    last, caught_up = replica["LastFetchTimestamp"], replica.get("LastCaughtUpTimestamp", -1)
    return last, caught_up if caught_up >= 0 and 0 <= last - caught_up <= _HELD_FETCH_MAX_MS else last


def follow_up_in(event: dict[str, Any], stall_after_ms: int, interval_ms: int) -> float | None:
    """Seconds after `event`'s answer (a `quorum_reading`) that a reading should follow it: when an unfenced
    broker's fetch reaches `stall_after_ms` before the next regular reading (module docstring); None
    otherwise."""
    if not stall_after_ms:
        return None
    due = [stall_after_ms - age for _, age, fenced in event["fetches"]
           if age is not None and not fenced and 0 < stall_after_ms - age < interval_ms - FOLLOW_UP_MARGIN_MS]
    return (min(due) + FOLLOW_UP_MARGIN_MS) / 1000 if due else None


class QuorumReader:
    """Reads every target's quorum every `options.quorum_interval_ms` while the rounds run (`run`)."""

    def __init__(self, targets: Sequence[Target], options: ProbeOptions, view: Callable[[Target], TargetView],
                 connection: type[Connection] = Connection) -> None:
        self.targets = list(targets)
        self.options = options
        self.view = view
        self.connection = connection
        self.links = {t.name: QuorumLink() for t in self.targets}
        self.readings = 0

    async def run(self, emit: Callable[[list[dict[str, Any]]], Awaitable[None]], done: asyncio.Event,
                  slots: Any) -> None:
        """A tick every interval until `done`: a reading of each target whose rounds reached a cluster and
        whose last reading is over (`slots`: the prober's, slots.Slots)."""
        loop = asyncio.get_running_loop()
        interval = self.options.quorum_interval_ms / 1000
        busy: dict[str, asyncio.Task[None]] = {}
        next_tick = loop.time()
        try:
            while not done.is_set():
                for target in self.targets:
                    task = busy.get(target.name)
                    if task is None or task.done():
                        busy[target.name] = loop.create_task(self._read_and_emit(target, emit, slots))
                next_tick = max(next_tick + interval, loop.time())
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(done.wait(), next_tick - loop.time())
            await asyncio.gather(*busy.values(), return_exceptions=True)
        finally:
            for link in self.links.values():
                link.close()

    async def _read_and_emit(self, target: Target, emit: Callable[[list[dict[str, Any]]], Awaitable[None]],
                             slots: Any) -> None:
        try:
            event = await self.read(target, slots)
            if event is None and self.links[target.name].failing and len(target.bootstrap) > 1:
                # The next address at once, not a tick later: a reading through a broker cut off from its
                # controllers times out, and the stall it would show came an interval late.
                event = await self.read(target, slots)
            if event is not None:
                self.readings += 1
                await emit([event])
                follow = follow_up_in(event, target.stall_after_ms, self.options.quorum_interval_ms)
                if follow is not None:
                    loop = asyncio.get_running_loop()
                    await asyncio.sleep(max(0.0, follow - (loop.time() - self.links[target.name].answered)))
                    event = await self.read(target, slots)
                    if event is not None:
                        self.readings += 1
                        await emit([event])
        except Exception:  # one target's failure must not end the loop
            log.exception("quorum reading failed unexpectedly", extra={"target": target.name})

    async def read(self, target: Target, slots: Any) -> dict[str, Any] | None:
        """One reading of `target` (module docstring), or None."""
        view = self.view(target)
        if view.cluster_id is None:
            return None  # no round reached a cluster yet: nothing to compare an answer with
        link = self.links[target.name]
        loop = asyncio.get_running_loop()
        started = loop.time()
        bound = min(self.options.timeout_ms, self.options.quorum_interval_ms) / 1000
        if link.index is None:
            link.index = view.preferred % len(target.bootstrap)
        host, port = target.bootstrap[link.index]
        try:
            # Not in the rounds' slots: a round's slow exchanges (a target's black holes) never delay a
            # reading. A reading is one connection per target, open for good, and one request at a time.
            if link.conn is None:
                link.conn = self.connection(host, port, deadline=started + bound, client_id=self.options.client_id,
                                            security=target.security, max_frame=self.options.max_response_bytes,
                                            **slots.of_target(target))
                await link.conn.open()
                await link.conn.negotiate()
                if target.security.sasl:
                    await link.conn.authenticate()
            conn = link.conn
            conn.deadline = loop.time() + bound
            quorum, link.answered = await _describe_quorum(conn), loop.time()
            registered, cluster_id = await _describe_cluster(conn)
            if cluster_id is not None and cluster_id != view.cluster_id:
                raise ProbeFailure("ANOTHER_CLUSTER", f"cluster {cluster_id}, not {view.cluster_id}")
            ts = clock.now_ms() - int((loop.time() - link.answered) * 1000)
            event = reading_of(quorum, registered, view.brokers, view.seen, ts=ts, source=self.options.source,
                               cluster_id=view.cluster_id, target=target.name)
            if event is None:
                raise ProbeFailure("NO_LEADER", "DescribeQuorum names no leader with its time")
        except (ProbeFailure, TimeoutError, OSError) as exc:
            failure = classify(exc)
            link.close()
            link.index = (link.index + 1) % len(target.bootstrap)  # the next address, next time
            if not link.failing:
                log.warning("quorum reading failed; trying the next bootstrap address", extra={
                    "target": target.name, "endpoint": format_address(host, port), "error": str(failure)})
            link.failing = True
            return None
        if link.failing:
            log.info("quorum reading answers again", extra={"target": target.name,
                                                            "endpoint": format_address(host, port)})
        link.failing = False
        return event


async def _describe_quorum(conn: Connection) -> dict[str, Any]:
    version = conn.supported(DESCRIBE_QUORUM, 1, 2)
    if version is None:
        raise ProbeFailure("UNSUPPORTED_VERSION", "no DescribeQuorum v1+ (last fetch times)")
    return await describe_quorum(conn, version)


async def _describe_cluster(conn: Connection) -> tuple[dict[int, bool] | None, str | None]:
    """(node id -> fenced, cluster id), or (None, None) when the broker does not offer DescribeCluster v2
    (Kafka before 4.0) or refuses it: the reading then carries no registration."""
    if conn.supported(DESCRIBE_CLUSTER, 2, 2) is None:
        return None, None
    try:
        body = await describe_cluster(conn, 2)
    except KafkaErrorResponse:
        return None, None
    return {b["BrokerId"]: b["IsFenced"] for b in body["Brokers"]}, body["ClusterId"]
