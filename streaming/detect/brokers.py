"""Broker rules: heartbeats, fencing, partitions and the broker lifecycle.

Plain Python over contract records; see README.md beside this file for the exact reading.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from streaming.config import RuleSettings
from streaming.detect.alerts import Emitter, Incidents
from streaming.detect.naming import duration_text
from streaming.records.contract import Broker, BrokerHeartbeat, BrokerState, MetadataResponse

__all__ = ["LEGAL_TRANSITIONS", "BrokerTracker"]

LEGAL_TRANSITIONS = frozenset({
    ("OFFLINE", "FENCED"), ("FENCED", "ONLINE"), ("ONLINE", "FENCED"),
    ("ONLINE", "STOPPING"), ("FENCED", "STOPPING"),
    ("ONLINE", "OFFLINE"), ("FENCED", "OFFLINE"), ("STOPPING", "OFFLINE"),
    # Real Kafka 4.4: the controller fences a broker when its controlled shutdown is done and keeps it
    # registered, fenced, while it is down (measured; README "Real Kafka").
    ("STOPPING", "FENCED"),
})

HEARTBEAT_LOST = "broker.heartbeat_lost"
HEARTBEAT_LATE = "broker.heartbeat_late"
STALLED = "broker.stalled"
FENCED = "broker.fenced"
PARTITIONED = "broker.partitioned"
STUCK = "broker.stuck_stopping"
EPOCH = "broker.epoch_regression"
FLAPPING = "broker.flapping"
ILLEGAL = "broker.illegal_transition"
_RULES = (HEARTBEAT_LOST, FENCED, PARTITIONED, STUCK, EPOCH, FLAPPING, ILLEGAL)
# Every rule about one broker: all of them end when the broker leaves its cluster.
_ALL_RULES = (*_RULES, HEARTBEAT_LATE, STALLED)


# The leader stamps a broker's last fetch up to KafkaRaftClient.MAX_FETCH_WAIT_MS (500 ms) after the broker
# stopped, and Kafka's controller fences a silent broker a little after its session ran out: 500 ms more.
_FENCE_MARGIN_MS = 1000


def _fenced_on_purpose_below(rules: RuleSettings) -> int:
    """A reading that first shows a broker fenced, its `broker.stalled` not firing, with its fetch younger
    than this shows a broker Kafka fenced while it still fetched (*stopped*: README "Broker rules"). Kafka
    fences a silent broker a session after its last heartbeat, and a broker heartbeats every interval, so
    a lost session's fence shows a fetch at least the session less an interval (less the margin) old: 6 s
    at Kafka's defaults. Not `stall_after_ms`: with a short session Kafka fences a frozen broker before
    its fetch is that old (a 3 s session), and the readings that would show a controlled shutdown's
    broker fenced while it fetched may be missing (the one through that broker fails)."""
    return rules.session_timeout_ms - rules.heartbeat_interval_ms - _FENCE_MARGIN_MS


@dataclass
class BrokerTracker:
    """Everything known about one broker (`cluster_id`, `broker_id`): a `Tracker`."""

    cluster_id: str | None
    broker_id: int
    last_hb: int | None = None
    # When a new active controller was first reported: like Kafka's (ClusterControlManager.activate),
    # it gives every registered broker a full session from then on.
    session_reset_at: int | None = None
    # Since when the cluster's responders report no active controller: nobody holds the broker's
    # session (nobody can fence it), so its heartbeat deadline waits for a controller (README).
    session_held_since: int | None = None
    # Up to when a collector that says its rounds (observers.py) watched the broker's cluster: a
    # heartbeat deadline after it is not known to have passed unheard yet (None: no such collector).
    observed_until: int | None = None
    # Since when a quorum reading showed the broker fenced while it was still fetching (issue 44): its
    # controller took it out itself (a controlled shutdown done, a start not caught up yet), so no session
    # runs and no heartbeat deadline falls due, until it is seen unfenced (README "Broker rules").
    stopped_at: int | None = None
    max_epoch: int | None = None
    fenced: bool | None = None
    fenced_since: int | None = None
    answered_at: int | None = None
    # The first answer at least a heartbeat interval after the last heartbeat, since that heartbeat.
    counting_since: int | None = None
    state: str | None = None
    state_since: int | None = None
    changes: list[int] = field(default_factory=list)
    last_illegal: int | None = None
    last_regression: int | None = None
    rack: str | None = None
    endpoints: list[str] = field(default_factory=list)
    # The address the latest broker list named it at (what clients are told): its alerts' broker_host.
    listed_address: str | None = None
    updated_ms: int = 0
    # When the broker left its cluster (unregistered, or replaced at its address by another node
    # id: README "Broker rules"): from then on it has no rule, and the engine forgets it.
    gone_at: int | None = None
    # Whether another node id of the cluster has taken an address of this broker's at a moment
    # (the engine's, from the cluster's advertisements); asked when heartbeat_lost falls due. Not pickled.
    replaced: Callable[[BrokerTracker, int], bool] | None = field(default=None, init=False, repr=False,
                                                                  compare=False)
    # The earliest deadline as of the last look, and the settings it was found with: nothing is
    # due before it. Valid until the tracker changes: every change of a field `deadlines` reads,
    # or of this broker's incidents, happens in a method below that clears it, but a later
    # `observed_until` that shows none of the deadlines it held back at that look (`_quiet_held`,
    # the earliest of them: `observe_until`). Not pickled.
    _quiet_until: float | None = field(default=None, init=False, repr=False, compare=False)
    _quiet_rules: RuleSettings | None = field(default=None, init=False, repr=False, compare=False)
    _quiet_held: float = field(default=math.inf, init=False, repr=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:
        # Only what the rules know goes into the state store, not the caches.
        state = self.__dict__.copy()
        for cache in ("_quiet_until", "_quiet_rules", "_quiet_held", "subject", "replaced"):
            state.pop(cache, None)
        return state

    @cached_property
    def subject(self) -> str:  # cached: asked for several times per event, and it never changes
        return f"{self.cluster_id}/{self.broker_id}"

    @property
    def host(self) -> str | None:
        """Where the broker was last seen, as its alerts name it: the address of the latest broker list
        that named it, else the first of its heartbeats' endpoints (naming.py)."""
        return self.listed_address or (self.endpoints[0] if self.endpoints else None)

    def _fire(self, incidents: Incidents, out: Emitter, rule: str, at: int, summary: str,
              target: str | None = None, **details: Any) -> None:
        incidents.fire(out, rule, self.subject, at, summary, cluster_id=self.cluster_id,
                       broker_id=self.broker_id, target=target, details=details)

    def _lost(self, incidents: Incidents, out: Emitter, at: int, summary: str) -> None:
        """broker.heartbeat_lost; one that follows an open broker.stalled names it (`escalates`): the
        warning's page, one incident (README "Broker rules")."""
        stalled = incidents.open.get((STALLED, self.subject))
        extra = {} if stalled is None else {"escalates": stalled.alert_id}
        self._fire(incidents, out, HEARTBEAT_LOST, at, summary, last_heartbeat_ms=self.last_hb, **extra)

    @property
    def session_start(self) -> int | None:
        """Where the broker's controller session runs from: its last heartbeat, or a later new
        active controller."""
        if self.last_hb is None or self.session_reset_at is None:
            return self.last_hb
        return max(self.last_hb, self.session_reset_at)

    # -- time -------------------------------------------------------------------------------

    def deadlines(self, rules: RuleSettings, incidents: Incidents) -> list[int]:
        """Moments at which a condition of this broker changes with no event needed."""
        return self._deadlines(rules, incidents)[0]

    def earliest(self, rules: RuleSettings, incidents: Incidents) -> float:
        """`Tracker.earliest`, as the last look found it while that holds, else looked at again and kept."""
        if self._quiet_rules is rules and self._quiet_until is not None:
            return self._quiet_until
        pending, held = self._deadlines(rules, incidents)
        self._quiet_until, self._quiet_rules, self._quiet_held = min(pending, default=math.inf), rules, held
        return self._quiet_until

    def _deadlines(self, rules: RuleSettings, incidents: Incidents) -> tuple[list[int], float]:
        """`deadlines`, and the earliest of them `observed_until` holds back (inf: none)."""
        held = math.inf
        if self.gone_at is not None:
            return [], held
        firing = incidents.open
        s = self.subject
        out = []
        # Each test looks at the tracker's own fields before the open incidents: this runs
        # before every event of the broker, and most brokers have nothing open.
        running = self.last_hb is not None and self.session_held_since is None and self.stopped_at is None
        if running and (HEARTBEAT_LOST, s) not in firing:
            out.append(self.session_start + rules.session_timeout_ms)
        late_ms = rules.heartbeat_late_ms
        if late_ms is not None and running and (HEARTBEAT_LATE, s) not in firing:
            out.append(self.session_start + late_ms)
        if self.fenced and self.fenced_since is not None and (FENCED, s) not in firing:
            out.append(self.fenced_since + rules.fenced_grace_ms)
        if self.state == "STOPPING" and self.state_since is not None and (STUCK, s) not in firing:
            out.append(self.state_since + rules.stopping_timeout_ms)
        if self.observed_until is not None:
            # A deadline that fires on silence or on a state still held falls due once a round at or after
            # it is known: nobody watched since the last one (README "Collectors: rounds, gaps, leaving").
            until = self.observed_until
            shown = [t for t in out if t <= until]
            if len(shown) < len(out):
                held = min(t for t in out if t > until)
            out = shown
        if self.answered_at is not None and (PARTITIONED, s) in firing:
            out.append(self.answered_at + rules.partition_window_ms)
        elif (self.counting_since is not None and self.last_hb is not None
              and self.counting_since + rules.heartbeat_interval_ms > self.session_start + rules.session_timeout_ms):
            # That answer starts to count after the broker was cut off: check again then.
            out.append(self.counting_since + rules.heartbeat_interval_ms)
        if self.last_regression is not None and (EPOCH, s) in firing:
            out.append(self.last_regression + rules.resolve_after_ms)
        if self.last_illegal is not None and (ILLEGAL, s) in firing:
            out.append(self.last_illegal + rules.resolve_after_ms)
        if len(self.changes) >= rules.flap_threshold and (FLAPPING, s) in firing:
            out.append(self.changes[-rules.flap_threshold] + rules.flap_window_ms)
        return out, held

    def on_time(self, now: int, rules: RuleSettings, incidents: Incidents, out: Emitter) -> None:
        """Apply every condition due at `now` (called for each deadline, in time order)."""
        self._quiet_until = None
        s = self.subject
        running = self.last_hb is not None and self.session_held_since is None and self.stopped_at is None
        if (running and now == self.session_start + rules.session_timeout_ms
                and not incidents.is_firing(HEARTBEAT_LOST, s)):
            if self.replaced is not None and self.replaced(self, now):
                self.leave(now, incidents, out)  # stopped, and another node took its place: no page
                return
            self._lost(incidents, out, now,
                       f"broker {self.broker_id} has sent no heartbeat for {duration_text(rules.session_timeout_ms)}")
        late_ms = rules.heartbeat_late_ms
        if (late_ms is not None and running and now == self.session_start + late_ms
                and not incidents.is_firing(HEARTBEAT_LATE, s)):
            self._fire(incidents, out, HEARTBEAT_LATE, now,
                       f"broker {self.broker_id} has sent no heartbeat for {duration_text(late_ms)} "
                       f"({rules.heartbeat_late_ratio:g} of the {duration_text(rules.session_timeout_ms)} session)",
                       last_heartbeat_ms=self.last_hb)
        if (self.fenced and self.fenced_since is not None
                and now == self.fenced_since + rules.fenced_grace_ms):
            self._fire(incidents, out, FENCED, now,
                       f"broker {self.broker_id} fenced for more than {duration_text(rules.fenced_grace_ms)}",
                       fenced_since_ms=self.fenced_since)
        if (self.state == "STOPPING" and self.state_since is not None
                and now == self.state_since + rules.stopping_timeout_ms):
            self._fire(incidents, out, STUCK, now,
                       f"broker {self.broker_id} STOPPING for more than {duration_text(rules.stopping_timeout_ms)}",
                       stopping_since_ms=self.state_since)
        if self.last_regression is not None and now == self.last_regression + rules.resolve_after_ms:
            incidents.resolve(out, EPOCH, s, now)
        if self.last_illegal is not None and now == self.last_illegal + rules.resolve_after_ms:
            incidents.resolve(out, ILLEGAL, s, now)
        if (len(self.changes) >= rules.flap_threshold
                and now == self.changes[-rules.flap_threshold] + rules.flap_window_ms):
            incidents.resolve(out, FLAPPING, s, now)
        self._check_partitioned(now, rules, incidents, out, None)

    def advance_to(self, now: int, rules: RuleSettings, incidents: Incidents, out: Emitter) -> None:
        """Fire what fell due strictly before `now`: an event at `now` proves that time passed."""
        if self._quiet_rules is rules and self._quiet_until is not None and now <= self._quiet_until:
            return  # before nearly every event of the broker: no need to look at its deadlines again
        done = None
        while True:
            pending, held = self._deadlines(rules, incidents)
            due = [t for t in pending if t < now and (done is None or t > done)]
            if not due:
                if done is None:  # nothing was due at all: every deadline is at `now` or later
                    self._quiet_until, self._quiet_rules, self._quiet_held = min(pending, default=math.inf), rules, held
                return
            done = min(due)
            self.on_time(done, rules, incidents, out)

    # -- partitioned --------------------------------------------------------------------------

    def _cut_off(self, now: int, rules: RuleSettings, incidents: Incidents) -> bool:
        if incidents.is_firing(HEARTBEAT_LOST, self.subject):
            return True
        heartbeat_old = self.last_hb is None or now - self.session_start >= rules.session_timeout_ms
        return bool(self.fenced) and heartbeat_old

    def _check_partitioned(self, now: int, rules: RuleSettings, incidents: Incidents, out: Emitter,
                           target: str | None) -> None:
        # Strict: at answered_at + window the answer has just left the window. Answers count from
        # the first one a heartbeat interval after the last heartbeat (a broker that froze or
        # crashed answered just before it stopped heartbeating, measured on Kafka 4.4), once a
        # further interval passed without a heartbeat (a thawed broker answers a moment before its
        # first heartbeat): the broker served clients while it kept missing heartbeats.
        answering = (self.answered_at is not None and now - self.answered_at < rules.partition_window_ms
                     and (self.last_hb is None or (self.counting_since is not None
                          and now >= self.counting_since + rules.heartbeat_interval_ms)))
        partitioned = answering and self._cut_off(now, rules, incidents)
        if partitioned:
            self._fire(incidents, out, PARTITIONED, now,
                       f"broker {self.broker_id} answers clients but has lost its controller session",
                       target=target, last_answer_ms=self.answered_at, last_heartbeat_ms=self.last_hb)
        else:
            incidents.resolve(out, PARTITIONED, self.subject, now)

    # -- events -------------------------------------------------------------------------------

    def _observe_fenced(self, fenced: bool, at: int, rules: RuleSettings, incidents: Incidents,
                        out: Emitter) -> None:
        if fenced and not self.fenced:
            self.fenced_since = at
        elif not fenced:
            self.fenced_since = None
            if self.stopped_at is not None:
                # Kafka unfences a broker on a heartbeat of its own: back from a stop, its session runs from
                # here at the earliest, not from a heartbeat before it stopped (its first one back, earlier
                # in event time, may reach the job after this: another micro-batch, another topic).
                self.stopped_at = None
                self.restart_session(at, incidents)
            incidents.resolve(out, FENCED, self.subject, at)
        self.fenced = fenced

    def on_reading(self, at: int, age: int | None, fenced: bool | None, rules: RuleSettings,
                   incidents: Incidents, out: Emitter) -> None:
        """One quorum reading of the broker at `at` (issue 44): its last fetch `age` ms old (None: unknown),
        its registration `fenced` (None: not read). Its fetch, when new, was applied as a heartbeat first."""
        if fenced is not None:
            if fenced or self.fenced is not False or self.fenced_since is not None or self.stopped_at is not None:
                self._quiet_until = None  # (read unfenced again, as before, it changes nothing `deadlines` reads)
            self._observe_fenced(fenced, at, rules, incidents, out)
        stall = rules.stall_after_ms
        if age is None or not stall:
            return
        if self.fenced:
            if not fenced or self.stopped_at is not None:
                return
            if incidents.is_firing(STALLED, self.subject):
                # The reading shows Kafka's controller fenced a stalled broker that still does not fetch:
                # its session ran out. A reading decides, never another topic's event: a fence read from
                # a broker_state or a heartbeat meets the broker's fetches in an order the micro-batches
                # choose (a restart's registration and its fence share one moment).
                if age >= stall and not incidents.is_firing(HEARTBEAT_LOST, self.subject):
                    self._quiet_until = None
                    self._lost(incidents, out, at, f"broker {self.broker_id} was fenced by its controller after "
                                                   f"no heartbeat for {age / 1000:.1f} s")
            elif age < _fenced_on_purpose_below(rules):
                self._quiet_until = None
                self.stopped_at = at  # fenced while fetching: its controller took it out itself
            return
        fetched = at - age
        if (age >= stall and self.stopped_at is None and self.session_held_since is None
                and (self.last_hb is None or self.last_hb < fetched + stall)
                and not incidents.is_firing(HEARTBEAT_LOST, self.subject)):
            self._fire(incidents, out, STALLED, fetched + stall,
                       f"broker {self.broker_id} has not fetched from its controller for {age / 1000:.1f} s",
                       last_fetch_ms=fetched, fetch_age_ms=age)

    def on_heartbeat(self, hb: BrokerHeartbeat, rules: RuleSettings, incidents: Incidents,
                     out: Emitter) -> None:
        self._quiet_until = None
        if hb.broker_epoch < 0:
            pass  # unknown epoch (-1, e.g. a DescribeQuorum observer): neither a regression nor a new highest
        elif self.max_epoch is not None and hb.broker_epoch < self.max_epoch:
            self.last_regression = hb.ts
            self._fire(incidents, out, EPOCH, hb.ts,
                       f"broker {self.broker_id} sent epoch {hb.broker_epoch} below {self.max_epoch}",
                       broker_epoch=hb.broker_epoch, highest_epoch=self.max_epoch, source=hb.source)
        else:
            self.max_epoch = hb.broker_epoch
        self._heard(hb.ts, incidents, out)
        if hb.fenced is not None:
            self._observe_fenced(hb.fenced, hb.ts, rules, incidents, out)
        if hb.rack is not None:
            self.rack = hb.rack
        if hb.endpoints:
            self.endpoints = sorted({e.address for e in hb.endpoints})
        self._check_partitioned(hb.ts, rules, incidents, out, None)

    def on_fetch(self, at: int, rules: RuleSettings, incidents: Incidents, out: Emitter) -> None:
        """A fetch from the active controller at `at`, shown by a quorum reading (quorum_events.py): a heartbeat
        of unknown epoch that says nothing else, without a record of its own."""
        self._quiet_until = None
        self._heard(at, incidents, out)
        self._check_partitioned(at, rules, incidents, out, None)

    def _heard(self, at: int, incidents: Incidents, out: Emitter) -> None:
        """A heartbeat (or a fetch) at `at`: the latest one starts the session again."""
        if self.last_hb is None or at > self.last_hb:
            s = self.subject
            self.last_hb = at
            self.counting_since = None
            incidents.resolve(out, HEARTBEAT_LOST, s, at)
            incidents.resolve(out, HEARTBEAT_LATE, s, at)
            stalled = incidents.started(STALLED, s)
            if stalled is not None and at >= stalled:  # a fetch after the stall (not the stalled one again)
                incidents.resolve(out, STALLED, s, at)

    def on_new_controller(self, at: int, incidents: Incidents) -> None:
        """A new active controller was first reported at `at` (the broker is advanced to `at`)."""
        if self.last_hb is not None and not incidents.is_firing(HEARTBEAT_LOST, self.subject):
            self._quiet_until = None
            self.session_reset_at = at

    def restart_session(self, at: int, incidents: Incidents) -> None:
        """The job could not hear the broker until `at` (its heartbeats' bus partition lost records
        unread: engine.py, `BusGap`): its session runs from `at` at the earliest, as after a takeover."""
        if self.last_hb is not None and not incidents.is_firing(HEARTBEAT_LOST, self.subject):
            self._quiet_until = None
            self.session_reset_at = at if self.session_reset_at is None else max(self.session_reset_at, at)

    def observe_until(self, until: int | None) -> None:
        """A collector that says its rounds watched the broker's cluster up to `until` (observers.py)."""
        if until == self.observed_until:
            return
        # A later `until` below every deadline the last look found held back shows none of them: what was
        # quiet stays so (a collector's round moves it on before nearly every look).
        if until is None or self.observed_until is None or until < self.observed_until or until >= self._quiet_held:
            self._quiet_until = None
        self.observed_until = until

    def hold_session(self, at: int) -> None:
        """From `at` the cluster reports no active controller (the broker is advanced to `at`)."""
        self._quiet_until = None
        self.session_held_since = at

    def release_session(self) -> None:
        """A controller is reported again: a deadline the hold kept back and not superseded by a
        new controller's fresh session falls due at its own time."""
        self._quiet_until = None
        self.session_held_since = None

    def on_state(self, ev: BrokerState, rules: RuleSettings, incidents: Incidents, out: Emitter) -> None:
        self._quiet_until = None
        s = self.subject
        previous = self.state if self.state is not None else ev.previous_state
        if ev.state in ("FENCED", "ONLINE", "OFFLINE"):
            self._observe_fenced(ev.state == "FENCED", ev.ts, rules, incidents, out)
        if previous is not None and previous != ev.state:
            self.changes = [c for c in self.changes if ev.ts - c < rules.flap_window_ms] + [ev.ts]
            if len(self.changes) >= rules.flap_threshold:
                self._fire(incidents, out, FLAPPING, ev.ts,
                           f"broker {self.broker_id} changed state {len(self.changes)} times "
                           f"within {duration_text(rules.flap_window_ms)}", changes=len(self.changes))
        claimed_from = ev.previous_state or previous
        if claimed_from is not None and claimed_from != ev.state \
                and (claimed_from, ev.state) not in LEGAL_TRANSITIONS:
            self.last_illegal = ev.ts
            self._fire(incidents, out, ILLEGAL, ev.ts,
                       f"broker {self.broker_id} went {claimed_from} -> {ev.state}",
                       from_state=claimed_from, to_state=ev.state)
        if ev.state != self.state:
            self.state_since = ev.ts
            if ev.state != "STOPPING":
                incidents.resolve(out, STUCK, s, ev.ts)
        self.state = ev.state
        self._check_partitioned(ev.ts, rules, incidents, out, None)

    def on_answer(self, response: MetadataResponse, rules: RuleSettings, incidents: Incidents,
                  out: Emitter) -> None:
        self._quiet_until = None
        if self.answered_at is None or response.ts > self.answered_at:
            self.answered_at = response.ts
        if (self.counting_since is None and self.last_hb is not None
                and response.ts >= self.last_hb + rules.heartbeat_interval_ms):
            self.counting_since = response.ts
        self._check_partitioned(response.ts, rules, incidents, out, response.target)

    def on_listed(self, entry: Broker, at: int, rules: RuleSettings, incidents: Incidents,
                  out: Emitter, target: str | None = None) -> None:
        """This broker appears in a response's broker list (of a response of `target`)."""
        if entry.rack is not None:
            self.rack = entry.rack
        self.listed_address = entry.address
        if not self.endpoints:
            self.endpoints = [entry.address]
        if entry.fenced is not None:
            self._quiet_until = None
            self._observe_fenced(entry.fenced, at, rules, incidents, out)
            self._check_partitioned(at, rules, incidents, out, target)

    def listed_again(self, at: int, rules: RuleSettings, incidents: Incidents, out: Emitter) -> None:
        """Listed by a response at `at` exactly as by the last one, with nothing changed since."""
        self.advance_to(at, rules, incidents, out)
        if at > self.updated_ms:
            self.updated_ms = at

    def leave(self, at: int, incidents: Incidents, out: Emitter) -> None:
        """The broker left its cluster at `at` (README "Broker rules"): every alert about it resolves,
        none can fire again, and its row says OFFLINE. The engine forgets it (`forgettable`)."""
        self._quiet_until = None
        for rule in _ALL_RULES:
            incidents.resolve(out, rule, self.subject, at)
        self.gone_at = at
        self.state, self.state_since, self.fenced, self.fenced_since = "OFFLINE", at, None, None

    # -- forgetting (README "Forgetting") ------------------------------------------------------

    def forgettable(self, now: int, ttl_ms: int, rules: RuleSettings, incidents: Incidents) -> bool:
        """Heard of by nothing (its events, a broker list, an answer) for longer than the state TTL
        before `now`, with no alert open and nothing due: the broker starts over. A held session
        with a heartbeat keeps it: its deadline falls due when a controller is reported again. A
        broker that left its cluster goes at once: whatever is heard of it next starts over."""
        if self.gone_at is not None:
            return True
        return (now - self.updated_ms > ttl_ms
                and not (self.session_held_since is not None and self.last_hb is not None)
                and not any((rule, self.subject) in incidents.open for rule in _RULES)
                and not self.deadlines(rules, incidents))

    def only_listed(self) -> bool:
        """Known from broker lists alone, never fenced: it holds nothing any rule reads (no
        heartbeat, state or answer; no alert can be open), only the rack and address of its rows."""
        return self.last_hb is None and self.state is None and self.answered_at is None and self.fenced_since is None

    def snapshot(self) -> dict[str, Any]:
        return {
            "cluster_id": self.cluster_id or "", "broker_id": self.broker_id, "state": self.state,
            "fenced": self.fenced, "broker_epoch": self.max_epoch, "last_heartbeat_ms": self.last_hb,
            "last_answer_ms": self.answered_at, "rack": self.rack, "endpoints": self.endpoints,
            "updated_ms": self.updated_ms,
        }
