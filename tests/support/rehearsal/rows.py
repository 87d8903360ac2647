"""One rehearsal row: open a real fault, kill -9 one part of the topology while it is open, let
its service manager (or the rehearsal, for what systemd would restart) bring it back, close the
fault, wait until every notification is delivered, and score the row (`scoring.py`).

Kills (`KILLS`): the driver (submit.sh and everything of its session: the SparkSubmit JVM and the
Python driver; the service restarts it and the job resumes from its checkpoint), a Spark worker (with
its executors; restarted after 5 s), one bus broker (restarted after 5 s), PostgreSQL (down 60 s,
then crash recovery), the notifier holding the lease (the standby takes over; the killed one comes
back as the standby), one probe (the other goes on; it comes back).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable

from sqlalchemy import select

from streaming.polling import poll
from streaming.store import notifier_lease
from support.rehearsal.scoring import RowScore, all_delivered, arrivals, now_ms, score_row
from support.rehearsal.targets import Fault, subject_of
from support.rehearsal.topology import Topology

__all__ = ["KILLS", "POSTGRES_DOWN_S", "Rehearsal"]

POSTGRES_DOWN_S = 60
RESTART_AFTER_S = 5  # a worker, a bus broker: back after this long, as a service manager brings them back

KILLS = ("driver", "worker", "bus broker", "postgres", "sending notifier", "probe")


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

    # ------------------------------------------------------------------ kills

    def _kill(self, what: str) -> threading.Thread | None:
        """kill -9 `what`; returns the thread that brings it back when the rehearsal must (not a Service)."""
        top = self.topology
        if what == "driver":
            assert top.job is not None
            top.job.kill9()
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
        if what == "worker":
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
            raise ValueError(f"unknown kill {what!r}: one of {KILLS}")

        def restore() -> None:
            time.sleep(delay)  # the outage itself
            back()

        thread = threading.Thread(target=restore, name=f"restore-{what}", daemon=True)
        thread.start()
        return thread

    # ------------------------------------------------------------------ a row

    def _delivered(self, since: int, fault: Fault, status: str) -> bool:
        got = {subject_of(a.alert) for a in arrivals(self.topology.receiver, since) if a.alert["status"] == status}
        return fault.expected <= got

    def run_row(self, name: str, target: str, *kills: str) -> RowScore:
        """Open `target`'s fault, kill -9 each of `kills` (at once) a second later, and score the row."""
        top = self.topology
        assert top.store is not None
        fault = top.targets.fault(target)
        fault = dataclasses.replace(fault, allowed=fault.allowed | self._flapping)
        self._flapping |= {"broker.flapping " + s.split(" ", 1)[1] for s in fault.expected | fault.allowed
                           if s.startswith("broker.")}
        since, since_ms = len(top.receiver.arrivals), now_ms()
        failure: str | None = None
        killed: float | None = None
        restoring: list[threading.Thread] = []
        kill = " + ".join(kills) or None
        self.log(f"row {name}: {fault.name}" + (f", kill -9 {kill}" if kill else ""))
        opened = time.monotonic()
        fault.open()
        try:
            try:
                if kills:
                    time.sleep(1)  # the fault is open, its alert on its way: then the kill
                    killed = time.monotonic()
                    restoring = [thread for what in kills if (thread := self._kill(what)) is not None]
                poll(lambda: self._delivered(since, fault, "firing"), self.alert_timeout_s,
                     f"the firing of {sorted(fault.expected)} at the receiver", interval_s=0.5)
            except AssertionError as exc:
                failure = str(exc).splitlines()[0]
        finally:
            for thread in restoring:
                thread.join()
            fault.close()
        try:
            poll(lambda: self._delivered(since, fault, "resolved"), self.alert_timeout_s,
                 "the resolution of every expected alert at the receiver", interval_s=0.5)
            poll(lambda: all_delivered(top.store), 120, "every notification in the outbox delivered", interval_s=0.5)
        except AssertionError as exc:
            failure = failure or str(exc).splitlines()[0]
        if kills:
            with contextlib.suppress(AssertionError):
                poll(self._services_up, 60, "every service running again", interval_s=0.5)
        row = score_row(name, fault, kill, store=top.store, receiver=top.receiver, since=since, since_ms=since_ms,
                        opened=opened, killed=killed, failure=failure)
        self.rows.append(row)
        self.log(f"row {name}: " + describe(row))
        return row

    def _services_up(self) -> bool:
        top = self.topology
        return all(s.running() for s in [top.job, *top.probes, *top.notifiers] if s is not None)


def describe(row: RowScore) -> str:
    return (f"{row.seen}/{row.expected} expected seen, {len(row.false_positives)} false positives "
            f"{row.false_positives or ''}, {len(row.lost)} lost {row.lost or ''}, {row.duplicated} duplicated, "
            f"alert {row.alert_s} s, recovered {row.recover_s} s" + (f"; FAILED: {row.failure}" if row.failure else ""))
