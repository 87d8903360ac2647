"""The prober: rounds over every target (bootstrap, then every known endpoint), and the live loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from streaming.collect.probe.controller_view import ViewMemory, read_controllers, view_events
from streaming.collect.probe.exchange import Answer, IdentityCheckUnusable, converse, response_event
from streaming.collect.probe.kraft_readings import LastReadings, heartbeats, registered, registrations
from streaming.collect.probe.layout import layout_event, layout_frame_limit, read_layout
from streaming.collect.probe.quorum import QuorumReader, TargetView
from streaming.collect.probe.slots import Slots
from streaming.collect.probe.targets import ProbeOptions, Target, endpoint_problem, format_address
from streaming.collect.protocol.client import Connection, ProbeFailure, classify
from streaming.plumbing import clock
from streaming.records.contract import REBOOTSTRAP_REQUIRED, CollectorRound, CollectorTargets, Expected, event_to_dict

__all__ = ["IDENTITY_RETRY_S", "EventSink", "Prober"]

log = logging.getLogger(__name__)

# After a broker refused ApiVersions v5 (see exchange.py), its endpoint is compared by cluster id
# for this long before the KIP-1242 check is tried again.
IDENTITY_RETRY_S = 300.0
# Refused addresses a target's events name per round (the log names them once, as they appear).
_NAMED_MAX = 10
# Refused addresses remembered per target (so that each is logged once); beyond it, forgotten.
_REFUSED_MAX = 4096


@dataclass
class Advert:
    """An endpoint a bootstrap answer advertised: for which (cluster id, node id), last seen when."""

    cluster_id: str | None
    node_id: int
    seen_ms: int
    host: str
    port: int


@dataclass
class TargetState:
    """What the prober remembers of one target between rounds."""

    preferred: int = 0  # index of the bootstrap address tried first
    cluster_id: str | None = None  # the cluster of the last successful bootstrap: what the rounds observe
    endpoints: dict[str, Advert] = field(default_factory=dict)
    seen: LastReadings = field(default_factory=LastReadings)
    failing: bool | None = None
    refused: dict[str, int] = field(default_factory=dict)  # invalid advertised address -> last seen (ms)
    over_cap: bool = False  # advertised more endpoints than the cap at the last bootstrap (said once)
    controller_view: ViewMemory = field(default_factory=ViewMemory)
    view_failing: bool = False  # the controller view gave no reading last round (said once)
    # The partition layout (layout.py): where the last bootstrap answered (host, port, cluster id,
    # responder), and when the last reading began.
    layout_from: tuple[str, int, str, int | None] | None = None
    layout_ms: int | None = None
    layout_failing: bool = False


# Where a probe round's events go (the bus publisher, a JSONL file, a test's list): the events as dicts.
EventSink = Callable[[list[dict[str, Any]]], Any]
# Where a round hands each exchange's response as it completes (the live loop: on to the EventSink).
EarlySink = Callable[[list[dict[str, Any]]], Awaitable[None]]


class Prober:
    """Probes a fixed set of targets round after round; keeps what rounds must remember.

    `probe_round(now_ms)` probes every target once and returns the events (their `ts` is
    `now_ms` plus the time the answer took, so tests can drive event time explicitly);
    `run(emit, stop=...)` is the live loop. `connection` is the client class each exchange opens
    (recorded answers in the byte-level tests; never a module global to patch, since a probe
    in another thread of the same process would talk to the replacement too).
    """

    def __init__(self, targets: Sequence[Target], options: ProbeOptions | None = None, *,
                 connection: type[Connection] = Connection) -> None:
        names = [t.name for t in targets]
        if len(set(names)) != len(names):
            raise ValueError("target names must be unique")
        self.targets = list(targets)
        self.options = options or ProbeOptions()
        self._connection = connection
        self._state = {t.name: TargetState() for t in self.targets}
        # Endpoints whose broker refused ApiVersions v5 with an error answer -> loop time to try again.
        self._no_identity_check: dict[str, float] = {}
        self.events_emitted = 0
        self.rounds = 0
        self.quorum = QuorumReader(self.targets, self.options, self._view, connection)

    def _view(self, target: Target) -> TargetView:
        """What the rounds know of `target` that its quorum readings need (quorum.py)."""
        state = self._state[target.name]
        brokers = {a.node_id for a in state.endpoints.values() if a.cluster_id == state.cluster_id}
        brokers |= {node for cluster, node in state.seen.registrations if cluster == state.cluster_id}
        return TargetView(state.cluster_id, state.preferred, frozenset(brokers), state.seen)

    @property
    def _timeout_s(self) -> float:
        return self.options.timeout_ms / 1000

    def failing_targets(self) -> list[str]:
        return sorted(name for name, st in self._state.items() if st.failing)

    # ------------------------------------------------------------ rounds

    def probe_round(self, now_ms: int | None = None) -> list[dict[str, Any]]:
        """Probe every target once (blocking) and return the events in time order."""
        return asyncio.run(self.probe_round_async(now_ms))

    def targets_event(self, now_ms: int) -> dict[str, Any]:
        """The `collector_targets` event: the targets this probe watches, from `now_ms` on (sent at its start:
        a target it watched before and no longer lists was removed from its configuration)."""
        return event_to_dict(CollectorTargets(now_ms, self.options.source, frozenset(t.name for t in self.targets)))

    async def probe_round_async(self, now_ms: int | None = None) -> list[dict[str, Any]]:
        now_ms = clock.now_ms() if now_ms is None else now_ms
        loop = asyncio.get_running_loop()
        slots = Slots.of(self.targets, self.options)
        started = loop.time()
        try:
            per_target = await asyncio.gather(*(self.probe_target(t, now_ms, started, slots) for t in self.targets))
            per_target += await asyncio.gather(*(self.probe_layout(t, now_ms, started, slots) for t in self.targets
                                                 if self.layout_due(t, now_ms)))
        finally:
            slots.close()
        events = [ev for evs in per_target for ev in evs] + ([self.targets_event(now_ms)] if not self.rounds else [])
        self.rounds += 1
        events.sort(key=lambda ev: ev["ts"])
        self.events_emitted += len(events)
        return events

    async def run(self, emit: EventSink, *, stop: asyncio.Event | None = None, rounds: int | None = None) -> None:
        """The live loop: a tick every `interval_ms`; each exchange's response is emitted as soon as
        it completes, the rest of a target's round when that target is done (`probe_target`). A
        target still busy from the previous tick skips this one.

        `emit` runs in a worker thread (it may block on a Kafka producer); with `rounds` the loop
        stops after that many ticks, once their probes are done.
        """
        stop = stop or asyncio.Event()
        loop = asyncio.get_running_loop()
        slots = Slots.of(self.targets, self.options)
        busy: dict[str, asyncio.Task[None]] = {}
        reading: dict[str, asyncio.Task[None]] = {}  # the layout readings, apart: a long one delays no round
        interval = self.options.interval_ms / 1000
        next_tick = loop.time()
        ticks = 0
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="probe-emit") as executor, contextlib.closing(slots):
            await loop.run_in_executor(executor, emit, [self.targets_event(clock.now_ms())])

            async def emit_reading(events: list[dict[str, Any]]) -> None:  # in order with every other emit
                await loop.run_in_executor(executor, emit, events)
                self.events_emitted += len(events)

            done = asyncio.Event()  # the quorum readings (quorum.py) run until the rounds stop
            reading_quorums = ([loop.create_task(self.quorum.run(emit_reading, done, slots))]
                               if self.options.quorum_interval_ms else [])

            async def probe_and_emit(target: Target, now_ms: int, started: float, layout: bool = False) -> None:
                try:
                    if layout:
                        events = await self.probe_layout(target, now_ms, started, slots)
                    else:
                        events = await self.probe_target(target, now_ms, started, slots, early=emit_reading)
                    if events:
                        await loop.run_in_executor(executor, emit, events)
                        self.events_emitted += len(events)
                except Exception:  # one target's failure must not end the loop
                    log.exception("probing or emitting failed", extra={"target": target.name})

            while not stop.is_set():
                now_ms, started = clock.now_ms(), loop.time()
                for target in self.targets:
                    task = busy.get(target.name)
                    if task is not None and not task.done():
                        log.warning("target still busy from the previous tick; skipped",
                                    extra={"target": target.name})
                        continue
                    busy[target.name] = loop.create_task(probe_and_emit(target, now_ms, started))
                    task = reading.get(target.name)
                    if self.layout_due(target, now_ms) and (task is None or task.done()):
                        reading[target.name] = loop.create_task(probe_and_emit(target, now_ms, started, layout=True))
                self.rounds += 1
                ticks += 1
                if rounds is not None and ticks >= rounds:
                    break
                next_tick = max(next_tick + interval, loop.time())
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), next_tick - loop.time())
            done.set()
            pending = [t for t in (*busy.values(), *reading.values(), *reading_quorums) if not t.done()]
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)

    # ------------------------------------------------------------ one target

    async def probe_target(self, target: Target, now_ms: int, started: float, slots: Slots,
                           early: EarlySink | None = None) -> list[dict[str, Any]]:
        """One round for one target: bootstrap, then every known endpoint (up to the cap) concurrently.

        With `early` (the live loop), each exchange's response goes to it as the exchange completes, and
        only the rest is returned: what the round derives from several answers (registrations, heartbeats)
        and its end (`collector_round`). One exchange that times out then holds back no other answer of
        the round (issue 45.3: it held every event of its cluster back, during the very fault it shows).
        Without it, every event of the round is returned."""
        loop = asyncio.get_running_loop()
        state = self._state[target.name]
        events: list[dict[str, Any]] = []
        sent = 0  # events[:sent] went to `early`

        def ts(answer: Answer) -> int:
            return now_ms + max(0, int((answer.done_s - started) * 1000))

        boot: Answer | None = None
        count = len(target.bootstrap)
        for attempt in range(count):
            if attempt and loop.time() - started >= self._timeout_s:
                break  # the round's time for bootstrapping is spent
            index = (state.preferred + attempt) % count
            host, port = target.bootstrap[index]
            answer = await self._exchange(target, host, port, None, slots, bootstrap=True,
                                          identity=_pinned_identity(target, state, host, port, now_ms))
            events.append(response_event(answer, target.name, ts(answer), self.options.source))
            if answer.error is None and _foreign(target, answer):
                # A pinned target answered by another cluster (a misroute the KIP-1242 check could
                # not refuse: the first round, an address the pinned cluster never advertised, a
                # broker older than 4.4). Its response reports the id; its brokers, endpoints and
                # heartbeats are not the target's, and a later round that stops reaching them must
                # not read as their silence (the rehearsal of 2026-11-27: a probe restarted during a
                # misroute published the stranger's heartbeats, then `broker.heartbeat_lost` for it).
                continue
            if answer.error is None:
                boot, state.preferred = answer, index
                if answer.cluster_id:
                    state.layout_from = (host, port, answer.cluster_id, answer.responder_node_id)
                break
        if boot is None:
            state.preferred = (state.preferred + 1) % count
        elif boot.cluster_id:
            state.cluster_id = boot.cluster_id

        invalid: list[str] = []
        if boot is not None:
            invalid = self._advertised(target, state, boot, now_ms)
            if boot.kraft and boot.quorum is None:
                # Cut off from the controller: ask another bootstrap address first next round.
                state.preferred = (state.preferred + 1) % count
        for address, advert in list(state.endpoints.items()):
            if now_ms - advert.seen_ms > target.forget_after_ms:
                del state.endpoints[address]
        over_cap = self._cap(target, state, boot is not None)
        if boot is not None and (invalid or over_cap):
            boot_event = next(ev for ev in events if ev["expected"] is None and ev["error"] is None)
            # Not in the contract (the job ignores it); a reader of the events sees what was left out.
            boot_event["endpoints_not_probed"] = {"over_cap": over_cap, "invalid": invalid[:_NAMED_MAX]}

        if early is not None:  # the bootstrap's answers, once the first one told what the cluster advertises
            await early(list(events))
            sent = len(events)

        async def exchanged(exchange: Coroutine[Any, Any, Answer]) -> tuple[Answer, dict[str, Any]]:
            answer = await exchange
            event = response_event(answer, target.name, ts(answer), self.options.source)
            if early is not None:
                await early([event])
            return answer, event

        probes = []
        for advert in state.endpoints.values():
            expected = Expected(advert.cluster_id, advert.node_id)
            probes.append(exchanged(self._exchange(target, advert.host, advert.port, expected, slots,
                                                   bootstrap=False, identity=expected)))
        view = None
        if target.controller_metrics and boot is not None:
            def received_ms() -> int:
                return now_ms + max(0, int((loop.time() - started) * 1000))

            (view, failures), *exchanges = await asyncio.gather(
                read_controllers(target.controller_metrics, self._timeout_s, self.options.max_response_bytes,
                                 received_ms), *probes)
            self._note_view(target, state, view, failures)
        else:
            exchanges = list(await asyncio.gather(*probes))
        answers = [answer for answer, _ in exchanges]
        events += [event for _, event in exchanges]
        if early is not None:
            sent = len(events)
        if boot is not None:
            if view is None:
                events.extend(registrations(boot, state.seen, ts(boot), self.options.source))
            events.extend(heartbeats(boot, [boot, *answers], state.seen, self.options.source, ts))
            if view is not None:
                # The controller's registrations replace DescribeCluster's (they tell STOPPING apart).
                events.extend(view_events(view, boot.cluster_id, state.seen, state.controller_view,
                                          self.options.source, target.session_timeout_ms,
                                          target.heartbeat_interval_ms))
        self._note_health(target, events)
        # Last, at the round's end: every event of the round is before it (streaming/records/collector.py).
        ended = now_ms + max(0, int((loop.time() - started) * 1000), *(ev["ts"] - now_ms for ev in events))
        events.append(event_to_dict(CollectorRound(
            ended, self.options.source, state.cluster_id, target.name,
            registered(boot) if boot is not None and boot.cluster_id == state.cluster_id else None)))
        return events[sent:]

    def layout_due(self, target: Target, now_ms: int) -> bool:
        """A reading of the target's partition layout is due: on, a bootstrap answered, and the last
        reading began at least `layout.interval_ms` ago."""
        state, interval = self._state[target.name], self.options.layout.interval_ms
        return bool(interval) and state.layout_from is not None and (
            state.layout_ms is None or now_ms - state.layout_ms >= interval)

    async def probe_layout(self, target: Target, now_ms: int, started: float, slots: Slots) -> list[dict[str, Any]]:
        """One reading of the partition layout (layout.py) from where the last bootstrap answered: its
        `partition_layout` event, or none when nothing could be read (logged once, as it starts
        and stops failing)."""
        state = self._state[target.name]
        if state.layout_from is None:
            return []
        host, port, cluster_id, responder = state.layout_from
        state.layout_ms = now_ms
        loop = asyncio.get_running_loop()
        async with slots.per_target[target.name], slots.shared:
            try:
                reading = await read_layout(target, host, port, self.options.layout, client_id=self.options.client_id,
                                            broker_id=responder, connection=self._connection,
                                            max_frame=layout_frame_limit(self.options), **slots.of_target(target))
            except (ProbeFailure, TimeoutError) as failure:
                if not state.layout_failing:
                    log.warning("partition layout not read", extra={
                        "target": target.name, "endpoint": format_address(host, port), "error": str(failure)})
                state.layout_failing = True
                return []
        if state.layout_failing:
            log.info("partition layout read again", extra={"target": target.name})
        state.layout_failing = False
        log.debug("partition layout read", extra={
            "target": target.name, "api": reading.api, "requests": reading.requests, "bytes": reading.bytes_read,
            "ms": reading.ms, "complete": reading.complete})
        ts = now_ms + max(0, int((loop.time() - started) * 1000))
        return [layout_event(reading, cluster_id, target.name, ts, self.options.source)]

    def _advertised(self, target: Target, state: TargetState, boot: Answer, now_ms: int) -> list[str]:
        """Record what a bootstrap answer advertises; return the addresses refused (with why).

        An address that cannot be probed (port outside 1..65535, empty or overlong host) is refused
        on its own, never failing the round; each is logged once, the first time it is seen."""
        refused: list[str] = list(boot.unlisted)
        for broker in boot.brokers or ():
            problem = endpoint_problem(broker.host, broker.port)
            if problem is None:
                address = format_address(broker.host, broker.port)
                state.endpoints[address] = Advert(boot.cluster_id, broker.node_id, now_ms, broker.host, broker.port)
            else:
                refused.append(f"{format_address(broker.host[:60], broker.port)} ({problem})")
        for address, seen_ms in list(state.refused.items()):
            if now_ms - seen_ms > target.forget_after_ms:
                del state.refused[address]
        new = [address for address in refused if address not in state.refused]
        if len(state.refused) + len(new) > _REFUSED_MAX:
            state.refused.clear()
        state.refused.update(dict.fromkeys(refused, now_ms))
        if new:
            log.warning("advertised endpoints refused: not probed", extra={
                "target": target.name, "endpoint": boot.endpoint, "count": len(new), "invalid": new[:_NAMED_MAX]})
        return refused

    def _cap(self, target: Target, state: TargetState, answered: bool) -> int:
        """Keep at most `max_endpoints` endpoints: the bootstrap addresses first, then the most
        recently advertised (among equals, the ones already probed, then the answer's order).
        Returns how many were left out; going over the cap, and back under it, is logged once."""
        cap = self.options.max_endpoints
        over = len(state.endpoints) - cap
        if over > 0:
            bootstrap = {format_address(host, port) for host, port in target.bootstrap}
            # sorted() is stable: equal keys keep the dict's order (known endpoints before new ones).
            ranked = sorted(state.endpoints.items(), key=lambda item: (item[0] in bootstrap, item[1].seen_ms),
                            reverse=True)
            state.endpoints = dict(ranked[:cap])
            if not state.over_cap:
                log.warning("more endpoints advertised than probe.max_endpoints_per_target: the rest not probed",
                            extra={"target": target.name, "max_endpoints": cap, "over_cap": over,
                                   "left_out": [address for address, _ in ranked[cap:cap + _NAMED_MAX]]})
        elif state.over_cap and answered:
            log.info("advertised endpoints within probe.max_endpoints_per_target again",
                     extra={"target": target.name, "max_endpoints": cap})
        if answered or over > 0:
            state.over_cap = over > 0
        return max(over, 0)

    @staticmethod
    def _note_view(target: Target, state: TargetState, view: Any, failures: list[str]) -> None:
        failing = view is None
        if failing and not state.view_failing:
            log.warning("controller view: no active controller's metrics; DescribeCluster speaks for registrations",
                        extra={"target": target.name, "errors": failures[:5]})
        elif not failing and state.view_failing:
            log.info("controller view answers again", extra={"target": target.name})
        state.view_failing = failing

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

    async def _exchange(self, target: Target, host: str, port: int, expected: Expected | None,
                        slots: Slots, *, bootstrap: bool, identity: Expected | None) -> Answer:
        """One exchange; `identity` is what the KIP-1242 check asks the broker to confirm (None: none).

        A bootstrap whose identity the broker refuses (REBOOTSTRAP_REQUIRED) publishes that identity
        as its `expected`: the address leads elsewhere than the pinned cluster's node (a misroute of
        that endpoint), and the refusal reports no cluster id for the target."""
        loop = asyncio.get_running_loop()
        answer = Answer(endpoint=format_address(host, port), expected=expected)
        limits = {"connection": self._connection, "max_frame": self.options.max_response_bytes,
                  **slots.of_target(target)}
        async with slots.per_target[target.name], slots.shared:
            begun = loop.time()
            deadline = begun + self._timeout_s
            retry_at = self._no_identity_check.get(answer.endpoint)
            if retry_at is not None and begun < retry_at:
                identity = None
            try:
                try:
                    await converse(target, host, port, deadline, answer, client_id=self.options.client_id,
                                   bootstrap=bootstrap, identity=identity, **limits)
                except IdentityCheckUnusable as unusable:
                    # The broker offers ApiVersions v5 but refused our KIP-1242 request with an error
                    # answer: compare the reported cluster id instead, on a new connection, for a while.
                    self._no_identity_check[answer.endpoint] = loop.time() + IDENTITY_RETRY_S
                    log.warning("KIP-1242 identity check refused; comparing cluster ids instead for a while",
                                extra={"target": target.name, "endpoint": answer.endpoint,
                                       "error": str(unusable.__cause__), "retry_in_s": IDENTITY_RETRY_S})
                    answer = Answer(endpoint=answer.endpoint, expected=expected)
                    await converse(target, host, port, deadline, answer, client_id=self.options.client_id,
                                   bootstrap=bootstrap, identity=None, **limits)
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
            answer.quorum = answer.controller_epoch = None
            if bootstrap and answer.error == REBOOTSTRAP_REQUIRED:
                answer.expected = identity
        return answer


def _foreign(target: Target, answer: Answer) -> bool:
    """True when a pinned target's answer comes from a cluster other than the pinned one."""
    return target.expected_cluster_id is not None and answer.cluster_id not in (None, target.expected_cluster_id)


def _pinned_identity(target: Target, state: TargetState, host: str, port: int, now_ms: int) -> Expected | None:
    """What a bootstrap address must confirm (KIP-1242) for a target pinned by `expected_cluster_id`:
    the pinned id and the node the pinned cluster advertised at that very address within
    `forget_after_ms`. None otherwise (the Metadata fallback): an address the pinned cluster does
    not advertise (a load balancer, an alias), or one not heard from lately, has no node id to send,
    and Kafka refuses a ClusterId without a NodeId (exchange.check_identity)."""
    pinned = target.expected_cluster_id
    advert = state.endpoints.get(format_address(host, port))
    if (pinned is None or advert is None or advert.cluster_id != pinned
            or now_ms - advert.seen_ms > target.forget_after_ms):
        return None
    return Expected(pinned, advert.node_id)
