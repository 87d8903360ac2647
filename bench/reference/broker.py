"""The broker rules of one broker (README "Broker rules")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .defaults import (
    FENCED_GRACE,
    FLAP_THRESHOLD,
    FLAP_WINDOW,
    HEARTBEAT_INTERVAL,
    LEGAL,
    PARTITION_WINDOW,
    RESOLVE_AFTER,
    SESSION_TIMEOUT,
    SEVERITY,
    STALL_AFTER,
    STATE_TTL,
    STOPPING_TIMEOUT,
)
from .incidents import Incidents, advance, seconds

__all__ = ["Broker"]


class Broker:
    def __init__(self, cluster_id: str | None, broker_id: int, incidents: Incidents,
                 late_after: int | None = None, replaced: Callable[[Broker, int], bool] | None = None,
                 observed_until: Callable[[], int | None] | None = None) -> None:
        self.cluster_id, self.broker_id, self.inc = cluster_id, broker_id, incidents
        # README "Collectors": up to when a collector's rounds observed the cluster (None: no observers);
        # a heartbeat, fenced or STOPPING deadline after it waits for a round that shows it still so.
        self.observed_until = observed_until or (lambda: None)
        # README "Broker rules": another node id of the cluster advertises an address of this broker's
        # that it no longer advertises itself (the fleet's advertisements at that moment).
        self.replaced = replaced or (lambda broker, now: False)
        self.addresses: set[str] = set()  # where it was last seen: its heartbeats' endpoints, else its first listing
        self.listed_at: str | None = None  # the address the latest broker list named it at
        self.rack: str | None = None
        self.gone = False  # it left its cluster: no rule, forgotten at once
        self.late_after = late_after  # broker.heartbeat_late: a heartbeat this old (None: the rule is off)
        self.subject = f"{cluster_id}/{broker_id}"  # a broker without a cluster id is "None/<id>"
        self.last_hb: int | None = None
        self.takeover: int | None = None  # a new active controller's first report, for every known broker
        self.held = False  # the cluster reports no active controller: the session deadline waits
        # README "Broker rules", *stopped*: a reading showed it fenced while it still fetched; no session runs
        # until it is seen unfenced.
        self.stopped = False
        self.max_epoch: int | None = None
        self.fenced: bool | None = None
        self.fenced_since: int | None = None
        self.answered_at: int | None = None
        self.counting_since: int | None = None
        self.state: str | None = None
        self.state_since: int | None = None
        self.changes: list[int] = []
        self.last_illegal: int | None = None
        self.last_regression: int | None = None
        self.last_heard = 0  # its latest event, broker list naming it, or answer

    def forgotten(self, now: int) -> bool:
        """README "Forgetting": heard of by nothing for longer than the TTL, with no alert of it open and
        nothing due (a held session with a heartbeat is due once a controller is named again)."""
        return self.gone or (now - self.last_heard > STATE_TTL and not (self.held and self.last_hb is not None)
                and not any(self.inc.firing(rule, self.subject) for rule in SEVERITY if rule.startswith("broker."))
                and not self.deadlines())

    def fire(self, rule: str, at: int, summary: str, target: str | None = None, **details: Any) -> None:
        self.inc.fire(rule, self.subject, at, summary, cluster_id=self.cluster_id, broker_id=self.broker_id,
                      target=target, **details)

    def session_start(self) -> int | None:
        if self.last_hb is None or self.takeover is None:
            return self.last_hb
        return max(self.last_hb, self.takeover)

    def observed(self, deadline: int) -> bool:
        """A deadline that fires on silence or on a state still held falls due once a round at or after
        it shows that."""
        until = self.observed_until()
        return until is None or deadline <= until

    def session_due(self, after: int | None) -> int | None:
        """The heartbeat deadline `after` ms into the session, when it can fall due (not held, observed)."""
        start = self.session_start()
        if after is None or start is None or self.held or self.stopped or not self.observed(start + after):
            return None
        return start + after

    def restart_session(self, at: int) -> None:
        """A takeover, or the end of a time nobody watched: the session starts afresh at `at` (one that
        timed out stays timed out)."""
        if self.last_hb is not None and not self.inc.firing("broker.heartbeat_lost", self.subject):
            self.takeover = at

    def deadlines(self) -> list[int]:
        if self.gone:
            return []
        firing, s, out = self.inc.firing, self.subject, []
        start = self.session_start()
        if (lost := self.session_due(SESSION_TIMEOUT)) is not None and not firing("broker.heartbeat_lost", s):
            out.append(lost)
        if (late := self.session_due(self.late_after)) is not None and not firing("broker.heartbeat_late", s):
            out.append(late)
        if self.fenced and self.fenced_since is not None and not firing("broker.fenced", s) and \
                self.observed(self.fenced_since + FENCED_GRACE):
            out.append(self.fenced_since + FENCED_GRACE)
        if firing("broker.partitioned", s):
            out.append(self.answered_at + PARTITION_WINDOW)  # it stops answering
        elif (self.counting_since is not None and start is not None
              and self.counting_since + HEARTBEAT_INTERVAL > start + SESSION_TIMEOUT):
            out.append(self.counting_since + HEARTBEAT_INTERVAL)  # answers start counting after the cut-off
        if self.state == "STOPPING" and not firing("broker.stuck_stopping", s) and \
                self.observed(self.state_since + STOPPING_TIMEOUT):
            out.append(self.state_since + STOPPING_TIMEOUT)
        if firing("broker.epoch_regression", s):
            out.append(self.last_regression + RESOLVE_AFTER)
        if firing("broker.illegal_transition", s):
            out.append(self.last_illegal + RESOLVE_AFTER)
        if firing("broker.flapping", s):
            out.append(self.changes[-FLAP_THRESHOLD] + FLAP_WINDOW)
        return out

    def on_time(self, now: int) -> None:
        if self.session_due(SESSION_TIMEOUT) == now:
            if self.replaced(self, now):
                self.leave(now)  # stopped, and another node took its place: nothing fires
                return
            self.lost(now, f"broker {self.broker_id} has sent no heartbeat for {seconds(SESSION_TIMEOUT)}")
        if self.session_due(self.late_after) == now and not self.inc.firing("broker.heartbeat_late", self.subject):
            self.fire("broker.heartbeat_late", now,
                      f"broker {self.broker_id} has sent no heartbeat for {seconds(self.late_after)} "
                      f"({self.late_after / SESSION_TIMEOUT:g} of the {seconds(SESSION_TIMEOUT)} session)",
                      last_heartbeat_ms=self.last_hb)
        if self.fenced and now == self.fenced_since + FENCED_GRACE:
            self.fire("broker.fenced", now, f"broker {self.broker_id} fenced for more than {seconds(FENCED_GRACE)}",
                      fenced_since_ms=self.fenced_since)
        if self.state == "STOPPING" and now == self.state_since + STOPPING_TIMEOUT:
            self.fire("broker.stuck_stopping", now,
                      f"broker {self.broker_id} STOPPING for more than {seconds(STOPPING_TIMEOUT)}",
                      stopping_since_ms=self.state_since)
        if self.last_regression is not None and now == self.last_regression + RESOLVE_AFTER:
            self.inc.resolve("broker.epoch_regression", self.subject, now)
        if self.last_illegal is not None and now == self.last_illegal + RESOLVE_AFTER:
            self.inc.resolve("broker.illegal_transition", self.subject, now)
        if len(self.changes) >= FLAP_THRESHOLD and now == self.changes[-FLAP_THRESHOLD] + FLAP_WINDOW:
            self.inc.resolve("broker.flapping", self.subject, now)
        self.check_partitioned(now)

    def leave(self, at: int) -> None:
        """It left its cluster (unregistered, or replaced at its address): every alert of it resolves."""
        for rule in SEVERITY:
            if rule.startswith("broker."):
                self.inc.resolve(rule, self.subject, at)
        self.gone = True

    def advance(self, now: int) -> None:
        advance(self.deadlines, self.on_time, now, self.inc.alerts)

    def check_partitioned(self, now: int, target: str | None = None) -> None:
        """Cut off, answers counting, and an answer within the window (README: `answered_at >= now -
        window` is read strictly, as the engine does: at answered_at + window it is no longer answering)."""
        start = self.session_start()
        cut_off = self.inc.firing("broker.heartbeat_lost", self.subject) or (
            bool(self.fenced) and (start is None or now - start >= SESSION_TIMEOUT))
        counting = self.last_hb is None or (self.counting_since is not None
                                            and now >= self.counting_since + HEARTBEAT_INTERVAL)
        answering = self.answered_at is not None and now - self.answered_at < PARTITION_WINDOW
        if cut_off and counting and answering:
            self.fire("broker.partitioned", now,
                      f"broker {self.broker_id} answers clients but has lost its controller session",
                      target=target, last_answer_ms=self.answered_at, last_heartbeat_ms=self.last_hb)
        else:
            self.inc.resolve("broker.partitioned", self.subject, now)

    def lost(self, at: int, summary: str) -> None:
        """broker.heartbeat_lost; README: fired while broker.stalled is open, it names it (`escalates`)."""
        stalled = self.inc.open.get(("broker.stalled", self.subject))
        escalates = {} if stalled is None else {"escalates": stalled["alert_id"]}
        self.fire("broker.heartbeat_lost", at, summary, last_heartbeat_ms=self.last_hb, **escalates)

    def observe_fenced(self, fenced: bool, at: int) -> None:
        if fenced and not self.fenced:
            self.fenced_since = at
        elif not fenced:
            self.fenced_since = None
            if self.stopped:  # seen unfenced: its session runs again, from here at the earliest
                self.stopped = False
                self.restart_session(at)
            self.inc.resolve("broker.fenced", self.subject, at)
        self.fenced = fenced

    def on_reading(self, ts: int, age: int | None, fenced: bool | None) -> None:
        """README "Before Kafka knows", step 4: one broker of a quorum reading (its newer fetch was a heartbeat)."""
        if fenced is not None:
            self.observe_fenced(fenced, ts)
        if age is None:
            return
        if self.fenced:
            if not fenced or self.stopped:
                return
            if self.inc.firing("broker.stalled", self.subject):
                # README: a reading that shows a stalled broker fenced and its fetch stall_after_ms old is
                # Kafka ending a session that ran out.
                if age >= STALL_AFTER and not self.inc.firing("broker.heartbeat_lost", self.subject):
                    self.lost(ts, f"broker {self.broker_id} was fenced by its controller after no heartbeat "
                                  f"for {age / 1000:.1f} s")
            elif age < SESSION_TIMEOUT - HEARTBEAT_INTERVAL - 1000:
                # Fenced while fetching (README: younger than a lost session's fence can be): a controlled
                # shutdown done, or a start not caught up.
                self.stopped = True
            return
        fetched = ts - age
        if (age >= STALL_AFTER and not self.stopped and not self.held
                and (self.last_hb is None or self.last_hb < fetched + STALL_AFTER)
                and not self.inc.firing("broker.heartbeat_lost", self.subject)):
            self.fire("broker.stalled", fetched + STALL_AFTER,
                      f"broker {self.broker_id} has not fetched from its controller for {age / 1000:.1f} s",
                      last_fetch_ms=fetched, fetch_age_ms=age)

    def on_heartbeat(self, hb: dict[str, Any]) -> None:
        ts, epoch = hb["ts"], hb["broker_epoch"]
        if epoch < 0:
            pass  # unknown epoch: neither a regression nor the highest
        elif self.max_epoch is not None and epoch < self.max_epoch:
            self.last_regression = ts
            self.fire("broker.epoch_regression", ts,
                      f"broker {self.broker_id} sent epoch {epoch} below {self.max_epoch}",
                      broker_epoch=epoch, highest_epoch=self.max_epoch, source=hb["source"])
        else:
            self.max_epoch = epoch
        if self.last_hb is None or ts > self.last_hb:
            self.last_hb, self.counting_since = ts, None
            self.inc.resolve("broker.heartbeat_lost", self.subject, ts)
            self.inc.resolve("broker.heartbeat_late", self.subject, ts)
            stalled = self.inc.open.get(("broker.stalled", self.subject))
            if stalled is not None and ts >= stalled["starts_at"]:  # README: a heartbeat at or after its start
                self.inc.resolve("broker.stalled", self.subject, ts)
        if hb.get("fenced") is not None:
            self.observe_fenced(hb["fenced"], ts)
        if hb.get("rack") is not None:
            self.rack = hb["rack"]
        if hb.get("endpoints"):
            self.addresses = {f"{e['host']}:{e['port']}" for e in hb["endpoints"]}
        self.check_partitioned(ts)

    def on_state(self, ev: dict[str, Any]) -> None:
        ts, state = ev["ts"], ev["state"]
        previous = self.state if self.state is not None else ev.get("previous_state")
        if state in ("FENCED", "ONLINE", "OFFLINE"):
            self.observe_fenced(state == "FENCED", ts)
        if previous is not None and previous != state:  # a change
            self.changes = [c for c in self.changes if ts - c < FLAP_WINDOW] + [ts]
            if len(self.changes) >= FLAP_THRESHOLD:
                self.fire("broker.flapping", ts, f"broker {self.broker_id} changed state {len(self.changes)} "
                          f"times within {seconds(FLAP_WINDOW)}", changes=len(self.changes))
        claimed_from = ev.get("previous_state") or previous
        if claimed_from is not None and claimed_from != state and (claimed_from, state) not in LEGAL:
            self.last_illegal = ts
            self.fire("broker.illegal_transition", ts, f"broker {self.broker_id} went {claimed_from} -> {state}",
                      from_state=claimed_from, to_state=state)
        if state != self.state:
            self.state_since = ts
            if state != "STOPPING":
                self.inc.resolve("broker.stuck_stopping", self.subject, ts)
        self.state = state
        self.check_partitioned(ts)

    def on_answer(self, r: dict[str, Any]) -> None:
        ts = r["ts"]
        self.answered_at = ts if self.answered_at is None else max(self.answered_at, ts)
        if self.counting_since is None and self.last_hb is not None and ts >= self.last_hb + HEARTBEAT_INTERVAL:
            self.counting_since = ts
        self.check_partitioned(ts, r["target"])

    def place(self) -> tuple[str | None, str | None]:
        """Where its alerts say it runs: its latest listed address, else its first endpoint; its rack."""
        return self.listed_at or min(self.addresses, default=None), self.rack

    def on_listed(self, entry: dict[str, Any], r: dict[str, Any]) -> None:
        if entry.get("rack") is not None:
            self.rack = entry["rack"]
        self.listed_at = f"{entry['host']}:{entry['port']}"
        if not self.addresses:
            self.addresses = {f"{entry['host']}:{entry['port']}"}
        if entry.get("fenced") is not None:
            self.observe_fenced(entry["fenced"], r["ts"])
            self.check_partitioned(r["ts"], r["target"])
