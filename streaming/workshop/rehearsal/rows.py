"""One rehearsal row: open a real fault, disrupt one part of the topology while it is open (kill -9
it, or what an outage, an operator or a rollout does to it), let its service manager (or the
rehearsal, for what systemd would restart) bring it back, close the fault, wait until every
notification is delivered, and score the row (`scoring.py`).

Disruptions (`DISRUPTIONS`), the kills (`KILLS`) first: the driver (submit.sh and everything of its
session: the SparkSubmit JVM and the Python driver; the service restarts it and the job resumes from
its checkpoint), a Spark worker (with its executors; restarted after 5 s), one bus broker (restarted
after 5 s), PostgreSQL (down 60 s, then crash recovery), the notifier holding the lease (the standby
takes over; the killed one comes back as the standby), one probe (the other goes on; it comes back);
then (issue 41):
- `job down`: the driver killed and held down `JOB_DOWN_S` (the service restarts a unit after 2 s),
  then started again onto the backlog, which it reads in micro-batches capped by the topology's
  `spark.max_records_per_batch` (bench/rehearsal.py sets one below that backlog; the row's note: how
  many micro-batches, how many the cap cut);
- `probes frozen`: both probes stopped (SIGSTOP) `PROBES_FROZEN_S`, then thawed: nobody watches the
  targets meanwhile, so no broker may be paged for that time, and each probe raises one
  `collector.silent` (expected, fired and resolved);
- `probes rolled out`: each probe rolled as the shipped Kubernetes Deployment rolls it
  (deploy/k8s/probe.yaml: a new process with the same --source starts, the old one gets SIGTERM once
  the new one's --ready-file exists): no gap in the rounds, so no `collector.silent`.
`run_removal_row` removes a target while its fault's alerts fire: the probes restarted with a config
that no longer lists it resolve them (`details.reason` "target removed: ..."), then restarted with the
whole config again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import select

from streaming.plumbing import clock
from streaming.store import notifier_lease
from streaming.workshop.polling import poll
from streaming.workshop.rehearsal.scoring import (
    CatchUp,
    RowScore,
    all_delivered,
    answered,
    arrivals,
    catch_up,
    now_ms,
    score_row,
    still_open,
    told,
)
from streaming.workshop.rehearsal.services import Service
from streaming.workshop.rehearsal.targets import Fault, Subject, subject, subject_of
from streaming.workshop.rehearsal.topology import Topology

__all__ = ["DISRUPTIONS", "JOB_DOWN_S", "KILLS", "POSTGRES_DOWN_S", "PROBES_FROZEN_S", "TARGET_REMOVED",
           "Rehearsal"]

POSTGRES_DOWN_S = 60
JOB_DOWN_S = 60
PROBES_FROZEN_S = 20
RESTART_AFTER_S = 5  # a worker, a bus broker: back after this long, as a service manager brings them back
# How a removed target's alerts resolve (streaming/detect/README.md, "Collectors: rounds, gaps, leaving").
TARGET_REMOVED = "target removed"

KILLS = ("driver", "worker", "bus broker", "postgres", "sending notifier", "probe")
DISRUPTIONS = (*KILLS, "job down", "probes frozen", "probes rolled out")


class Rehearsal:
    def __init__(self, topology: Topology, *, alert_timeout_s: float = 240, log: Callable[[str], None] = print
                 ) -> None:
        self.topology = topology
        self.alert_timeout_s = alert_timeout_s
        self.log = log
        self.rows: list[RowScore] = []
        # `broker.flapping` of a broker an earlier row broke: the rehearsal breaks the same brokers
        # row after row, and two rows' faults within the flap window are the 4 changes the rule
        # counts, so the alert is true, and may land in any later row.
        self._flapping: set[str] = set()
        self._errors: list[BaseException] = []  # of the threads that bring a part back
        self._planned: int | None = None  # the last micro-batch a killed driver had planned

    # ------------------------------------------------------------------ disruptions

    def _collector_silent(self, *probes: int) -> frozenset[Subject]:
        return frozenset(subject("collector.silent", source=self.topology.probe_source(n)) for n in probes)

    def _explained(self, what: str) -> tuple[frozenset[Subject], frozenset[Subject]]:
        """The alerts a disruption raises itself: (expected, allowed)."""
        if what == "probes frozen":  # each probe silent for longer than a session
            return self._collector_silent(*range(len(self.topology.probes))), frozenset()
        if what == "probe":
            # True when the probe was down longer than a broker session (3 s): its restart delay (2 s),
            # its start and its first round; the other probe watches the targets meanwhile.
            return frozenset(), self._collector_silent(0)
        if what == "bus broker":
            # True when the killed node led a bus partition that carries the probes' rounds: until the
            # bus elects another leader (13 s in the run of 2026-11-29, past the allowed lateness of 5 s)
            # the probes' records for it wait in their producers, reach the job late and are quarantined
            # (`late_event`): detection never sees those rounds, and says so (blindness, not silence).
            return frozenset(), self._collector_silent(*range(len(self.topology.probes)))
        return frozenset(), frozenset()

    def _in_thread(self, what: str, work: Callable[[], None]) -> threading.Thread:
        def run() -> None:
            try:
                work()
            except BaseException as exc:  # the row's failure: run_row reports it
                self._errors.append(exc)

        thread = threading.Thread(target=run, name=f"restore-{what}", daemon=True)
        thread.start()
        return thread

    def _disrupt(self, what: str) -> threading.Thread | None:
        """Disrupt `what`; returns the thread that brings it back when the rehearsal must (not a Service)."""
        top = self.topology
        if what in ("driver", "job down"):
            assert top.job is not None
            top.job.kill9(down_s=JOB_DOWN_S if what == "job down" else None)
            self._planned = top.planned_batch()  # the killed driver's last: its checkpoint no longer moves
            return None
        if what == "probe":
            top.probes[0].kill9()
            return None
        if what == "sending notifier":
            with top.store.engine.connect() as conn:  # type: ignore[union-attr]
                holder = conn.execute(select(notifier_lease.c.pid)).scalar()
            sender = next((n for n in top.notifiers if n.pid == holder), None)
            if sender is None:
                raise RuntimeError(f"the lease holder (pid {holder}) is none of the notifiers "
                                   f"{[n.pid for n in top.notifiers]}")
            sender.kill9()
            return None
        if what == "probes frozen":
            for probe in top.probes:
                probe.signal(signal.SIGSTOP)

            def back() -> None:
                for probe in top.probes:
                    probe.signal(signal.SIGCONT)

            delay = PROBES_FROZEN_S
        elif what == "probes rolled out":
            def roll() -> None:  # one after the other, as two Deployments roll
                for probe in top.probes:
                    probe.roll()

            return self._in_thread(what, roll)
        elif what == "worker":
            assert top.spark is not None
            top.spark.kill_worker(0)
            back = lambda: top.spark.start_worker(0)  # type: ignore[union-attr]  # noqa: E731
            delay = RESTART_AFTER_S
        elif what == "bus broker":
            top.bus.kill_node(1)
            back = lambda: top.bus.restart_node(1, timeout_s=120)  # noqa: E731
            delay = RESTART_AFTER_S
        elif what == "postgres":
            assert top.postgres is not None
            top.postgres.crash()
            back = top.postgres.serve
            delay = POSTGRES_DOWN_S
        else:
            raise ValueError(f"unknown disruption {what!r}: one of {DISRUPTIONS}")

        def restore() -> None:
            time.sleep(delay)  # the outage itself
            back()

        return self._in_thread(what, restore)

    # ------------------------------------------------------------------ a row

    def _delivered(self, since: int, fault: Fault, status: str, resolved_by: str | None = None) -> bool:
        return fault.expected <= told(arrivals(self.topology.receiver, since), status, resolved_by)

    def _row_fault(self, target: str, expected: frozenset[Subject] = frozenset(),
                   allowed: frozenset[Subject] = frozenset()) -> Fault:
        """`target`'s fault, with what the row's disruption explains besides, and the flapping earlier rows
        explain."""
        fault = self.topology.targets.fault(target)
        fault = dataclasses.replace(fault, expected=fault.expected | expected,
                                    allowed=fault.allowed | allowed | self._flapping)
        self._flapping |= {"broker.flapping " + s.split(" ", 1)[1] for s in fault.expected | fault.allowed
                           if s.startswith("broker.")}
        return fault

    def run_row(self, name: str, target: str, *kills: str) -> RowScore:
        """Open `target`'s fault, disrupt each of `kills` (at once) a second later, and score the row."""
        top = self.topology
        assert top.store is not None
        explained = [self._explained(what) for what in kills]
        fault = self._row_fault(target, frozenset().union(*(e for e, _ in explained)),
                                frozenset().union(*(a for _, a in explained)))
        since, since_ms = len(top.receiver.arrivals), now_ms()
        failure: str | None = None
        killed: float | None = None
        killed_ms = 0
        restoring: list[threading.Thread] = []
        kill = " + ".join(kills) or None
        self._errors.clear()
        self.log(f"row {name}: {fault.name}" + (f", {kill}" if kill else ""))
        opened = time.monotonic()
        fault.open()
        try:
            try:
                if kills:
                    time.sleep(1)  # the fault is open, its alert on its way: then the kill
                    killed, killed_ms = time.monotonic(), clock.now_ms()
                    restoring = [thread for what in kills if (thread := self._disrupt(what)) is not None]
                poll(lambda: self._delivered(since, fault, "firing"), self.alert_timeout_s,
                     f"the firing of {sorted(fault.expected)} at the receiver", interval_s=0.5)
            except AssertionError as exc:
                failure = str(exc).splitlines()[0]
        finally:
            for thread in restoring:
                thread.join()
            fault.close()
        if self._errors:
            failure = failure or f"bringing {kill} back: {self._errors[0]!r}"
        try:
            poll(lambda: self._delivered(since, fault, "resolved"), self.alert_timeout_s,
                 "the resolution of every expected alert at the receiver", interval_s=0.5)
            self._settle(fault)
            poll(lambda: all_delivered(top.store), 120, "every notification in the outbox delivered", interval_s=0.5)
        except AssertionError as exc:
            failure = failure or str(exc).splitlines()[0]
        if kills:
            with contextlib.suppress(AssertionError):
                poll(self._services_up, 60, "every service running again", interval_s=0.5)
        note = str(self._catch_up(killed_ms)) if "job down" in kills else None
        row = score_row(name, fault, kill, store=top.store, receiver=top.receiver, since=since, since_ms=since_ms,
                        opened=opened, killed=killed, failure=failure, note=note)
        return self._done(row, since)

    def _settle(self, fault: Fault) -> None:
        """Wait until every alert the closed fault may raise has resolved: one resolved after its row ended
        was scored as the next row's (the run of 2026-11-29: `broker.fenced` of a broker cut from the
        quorum, resolved 11 s after it fired, once the expected alerts had resolved). Flapping is left:
        it resolves when its window passes, in a later row (`_flapping`)."""
        settling = (fault.expected | fault.allowed) - self._flapping
        assert self.topology.store is not None
        store = self.topology.store
        poll(lambda: not still_open(store, settling), self.alert_timeout_s,
             f"the resolution of every alert the fault may raise ({sorted(settling)})", interval_s=0.5)

    def _done(self, row: RowScore, since: int) -> RowScore:
        self.rows.append(row)
        self.log(f"row {row.name}: " + describe(row))
        for arrival in arrivals(self.topology.receiver, since):  # what a false positive said, to find its cause
            alert = arrival.alert
            if subject_of(alert) in row.false_positives:
                self.log(f"  false positive {subject_of(alert)} {alert['status']}: {alert['summary']} (starts_at "
                         f"{alert['starts_at']}, ends_at {alert['ends_at']}, details {alert['details']})")
        return row

    def _catch_up(self, killed_ms: int) -> CatchUp | str:
        top = self.topology
        assert top.job is not None and top.store is not None
        restarted = next((ms for ms in top.job.started_ms if ms >= killed_ms), None)
        if restarted is None:
            return "the job did not start again"
        return catch_up(top.store, restarted, self._planned, top.batch_cap, top.telemetry_partitions)

    def run_removal_row(self, name: str, target: str) -> RowScore:
        """Open `target`'s fault; once its alerts fire, restart the probes (one after the other, each
        once the one before is up: `systemctl restart`, the old process gone before the new one starts)
        with a config that no longer lists the target, which resolves them (`TARGET_REMOVED`); close the
        fault, restart the probes with the whole config again, and score the row."""
        top = self.topology
        assert top.store is not None
        # A probe's restart is a gap in its rounds, true `collector.silent` when longer than a broker session.
        fault = self._row_fault(target, allowed=self._collector_silent(*range(len(top.probes))))
        since, since_ms = len(top.receiver.arrivals), now_ms()
        failure: str | None = None
        notes: list[str] = []
        self.log(f"row {name}: {fault.name}, then the probes restarted without {target}")
        opened = time.monotonic()
        fault.open()
        try:
            try:
                poll(lambda: self._delivered(since, fault, "firing"), self.alert_timeout_s,
                     f"the firing of {sorted(fault.expected)} at the receiver", interval_s=0.5)
                removed = time.monotonic()
                notes.append(self._restart_probes(top.config_without(target), f"without {target}"))
                poll(lambda: self._delivered(since, fault, "resolved", TARGET_REMOVED), self.alert_timeout_s,
                     f"the resolution of every expected alert ({TARGET_REMOVED}) at the receiver", interval_s=0.5)
                notes.append(f"resolved {time.monotonic() - removed:.1f} s after the first restart began")
            except AssertionError as exc:
                failure = str(exc).splitlines()[0]
        finally:
            fault.close()
        try:
            back_ms = clock.now_ms()
            notes.append(self._restart_probes(top.config_path, "with every target"))
            poll(lambda: answered(top.store, target, back_ms), self.alert_timeout_s,  # type: ignore[arg-type]
                 f"{target} answering again in the store", interval_s=0.5)
            self._settle(fault)
            poll(lambda: all_delivered(top.store), 120, "every notification in the outbox delivered", interval_s=0.5)
        except AssertionError as exc:
            failure = failure or str(exc).splitlines()[0]
        row = score_row(name, fault, TARGET_REMOVED, store=top.store, receiver=top.receiver, since=since,
                        since_ms=since_ms, opened=opened, killed=None, failure=failure, resolved_by=TARGET_REMOVED,
                        note="; ".join(notes))
        return self._done(row, since)

    def _restart_probes(self, config: Path, how: str) -> str:
        """Restart every probe with `config`, one after the other (each once the one before is up: its
        first round out). Says how long each took, from its stop to its first round."""
        took = []
        for n, probe in enumerate(self.topology.probes):
            began = time.monotonic()
            probe.restart(self.topology.probe_command(n, config))
            poll(lambda probe=probe: _ready(probe), 120, f"{probe.name} up again, {how}", interval_s=0.1,
                 retry_on=())
            took.append(f"{time.monotonic() - began:.1f}")
        return f"probes restarted {how} in {', '.join(took)} s"

    def _services_up(self) -> bool:
        top = self.topology
        return all(s.running() for s in [top.job, *top.probes, *top.notifiers] if s is not None)


def _ready(service: Service) -> bool:
    """Its process has made its first round (its ready file); an AssertionError when it exited."""
    if not service.running():
        raise AssertionError(f"{service.name} exited {service.proc.returncode if service.proc else None}")
    return service.ready_path is not None and service.ready_path.exists()


def describe(row: RowScore) -> str:
    return (f"{row.seen}/{row.expected} expected seen, {len(row.false_positives)} false positives "
            f"{row.false_positives or ''}, {len(row.lost)} lost {row.lost or ''}, {row.duplicated} duplicated, "
            + (f"allowed and seen {row.allowed_seen}, " if row.allowed_seen else "") +
            f"alert {row.alert_s} s, recovered {row.recover_s} s" + (f"; {row.note}" if row.note else "")
            + (f"; FAILED: {row.failure}" if row.failure else ""))
