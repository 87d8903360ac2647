"""A webhook receiver down for 10 minutes: is every notification delivered once, in order?

    .venv/bin/python bench/outage_receiver.py                          # 10 minutes down, 40 subjects
    .venv/bin/python bench/outage_receiver.py --down-minutes 60 --subjects 200
    .venv/bin/python bench/outage_receiver.py --json                   # last line: one JSON object

The receiver is a real HTTP server in its own process (`outage_receiver.py receive`), on a fixed
127.0.0.1 port, that appends every notification it accepts to a file before it answers 200. The
bench delivers a first wave of firing alerts to it, kills it with SIGKILL, and while it is down
records the fleet's further alerts (the first incidents resolve, second incidents fire and some
resolve, new subjects fire) and runs the notifier; then it starts the receiver again on the same
port and runs the notifier until every outbox row is delivered.

The notifier is the real `Notifier` (streaming/notify/delivery.py) over a real SQLite store,
with its default retry schedule (1 s doubling to 5 min, with jitter) and dead-letter limits; only
its clock is the bench's, moved `--step-s` per pass, so that a 10-minute outage takes seconds.
The sockets are real: while the receiver is down, every attempt is refused by the kernel.

Figures: how long the receiver was down (notifier clock, and wall time its process was gone),
notifications recorded, delivered, duplicates (the same (alert_id, status) accepted twice), lost
(never accepted), out of order (per rule and subject), failed attempts during the outage, and the
catch-up time after the receiver came back. `tests/notify/test_notify_outage.py` runs the same code.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sqlalchemy import func, select, update  # noqa: E402 - after the path set-up

from streaming.config import FleetwatchConfig  # noqa: E402
from streaming.notify import Notifier, NotifyOptions  # noqa: E402
from streaming.plumbing.logs import setup_logging  # noqa: E402
from streaming.plumbing.ports import free_port, nobody_listens_on  # noqa: E402
from streaming.plumbing.receiver import Reply, Request, WebhookReceiver  # noqa: E402
from streaming.records.alert import ALERT_SCHEMA, RULES, Alert, alert_id, queue_subject_of  # noqa: E402
from streaming.store import Store, deliveries, outbox  # noqa: E402
from streaming.workshop.fake_clock import FakeClock  # noqa: E402

__all__ = ["OutageFigures", "run_outage"]


# -- the receiver process ----------------------------------------------------------------------

def receive(port: int, log_path: Path) -> None:
    """Serve POSTs on 127.0.0.1:port; each accepted notification is a JSON line in log_path."""
    log = open(log_path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the process

    def answer(request: Request) -> Reply:
        body = json.loads(request.body)
        log.write(json.dumps({"alert_id": body["alert_id"], "status": body["status"],
                              "delivery_id": request.headers.get("x-fleetwatch-delivery-id")}) + "\n")
        log.flush()
        os.fsync(log.fileno())  # on disk before the 200: a kill after it loses nothing it accepted
        return Reply(200)

    server = WebhookReceiver(answer, port=port)
    print("ready", flush=True)
    server.serve_forever()


class ReceiverProcess:
    def __init__(self, port: int, log_path: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "receive", "--port", str(port), "--log", str(log_path)],
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if line.strip() != "ready":
            self.proc.kill()
            raise RuntimeError(f"the receiver did not start on port {port}")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)


# -- the fleet's alerts ------------------------------------------------------------------------

def _alert(cluster: str, broker: int, starts_at: int) -> dict[str, Any]:
    rule = "broker.heartbeat_lost"
    alert = {"schema": ALERT_SCHEMA, "alert_id": "", "rule": rule, "status": "firing",
             "severity": RULES[rule].severity, "cluster_id": cluster, "target": f"tgt-{cluster}", "broker_id": broker,
             "endpoint": None, "starts_at": starts_at, "ends_at": None,
             "summary": f"broker {broker} of {cluster} lost its heartbeat", "details": {}}
    alert["alert_id"] = alert_id(rule, queue_subject_of(alert), starts_at)
    return alert


def _resolved(alert: dict[str, Any], ends_at: int) -> dict[str, Any]:
    return {**alert, "status": "resolved", "ends_at": ends_at}


def _outage_events(first: list[dict[str, Any]], start: int, down_ms: int, subjects: int
                   ) -> list[tuple[int, dict[str, Any]]]:
    """(when, alert) during the outage: every first incident resolves, half the subjects fire a
    second incident (half of those resolve it), and a tenth more subjects fire for the first time."""
    events: list[tuple[int, dict[str, Any]]] = []
    for i, alert in enumerate(first):
        ends = start + (i * 7919) % (down_ms // 3)
        events.append((ends, _resolved(alert, ends)))
        if i % 2 == 0:
            again = _alert(alert["cluster_id"], alert["broker_id"], ends + down_ms // 3)
            events.append((again["starts_at"], again))
            if i % 4 == 0:
                events.append((again["starts_at"] + down_ms // 4, _resolved(again, again["starts_at"] + down_ms // 4)))
    for j in range(max(1, subjects // 10)):
        fresh = _alert("late", j, start + (j * 104_729) % down_ms)
        events.append((fresh["starts_at"], fresh))
    return sorted(events, key=lambda e: e[0])


def _record(store: Store, alerts: list[dict[str, Any]], at_ms: int) -> None:
    store.record_alerts(map(Alert.from_dict, alerts))
    with store.engine.begin() as conn:  # as if the job had written them at the notifier's `now`
        for alert in alerts:
            conn.execute(update(outbox).where(outbox.c.alert_id == alert["alert_id"],
                                              outbox.c.status == alert["status"]).values(created_at=at_ms))


def _all_delivered(store: Store) -> bool:
    with store.engine.connect() as conn:
        return conn.scalar(select(func.count()).select_from(outbox).where(outbox.c.delivered_at.is_(None))) == 0


# -- the bench ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class OutageFigures:
    down_s: float             # notifier clock
    down_wall_s: float        # wall time the receiver process was gone
    notifications: int        # (alert_id, status) recorded
    delivered: int            # accepted by the receiver, duplicates included
    duplicates: int
    lost: int
    out_of_order: int         # (rule, subject) queues whose arrivals are not in recorded order
    failed_attempts: int      # refused while the receiver was down
    catch_up_s: float         # notifier clock, from the receiver's return to the last delivery
    dead_letters: int
    passes: int
    wall_s: float

    def summary(self) -> str:
        return (f"receiver down {self.down_s / 60:.1f} min (notifier clock; its process gone {self.down_wall_s:.1f} s "
                f"of wall time): {self.notifications} notifications, {self.delivered} delivered, "
                f"{self.duplicates} duplicates, {self.lost} lost, {self.out_of_order} out of order, "
                f"{self.dead_letters} dead letters; {self.failed_attempts} failed attempts during the outage; "
                f"all delivered {self.catch_up_s:.0f} s after the receiver came back "
                f"({self.passes} notifier passes, {self.wall_s:.1f} s wall)")


def run_outage(workdir: Path, *, down_s: float = 600, subjects: int = 40, step_s: float = 2.0) -> OutageFigures:
    started = time.monotonic()
    port = free_port()
    arrivals_path = workdir / "arrivals.jsonl"
    store = Store(f"sqlite:///{workdir / 'outage.db'}")
    config = FleetwatchConfig.model_validate({"alerting": {"receivers": [
        {"name": "ops", "type": "webhook", "url": f"http://127.0.0.1:{port}/fleet"}]}})
    clock = FakeClock()  # moved step_s per notifier pass
    notifier = Notifier(config, store, NotifyOptions(group_wait_ms=0), env={}, clock=clock)
    expected: dict[tuple[str, str], list[tuple[str, str]]] = {}

    def record(alerts: list[dict[str, Any]]) -> None:
        for a in alerts:
            expected.setdefault((a["rule"], queue_subject_of(a)), []).append((a["alert_id"], a["status"]))
        _record(store, alerts, clock.ms)

    passes = 0

    def one_pass() -> None:
        nonlocal passes
        notifier.run(once=True)
        clock.advance(step_s)
        passes += 1

    receiver = ReceiverProcess(port, arrivals_path)
    try:
        first = [_alert(f"c{i // 4}", i % 4, clock.ms - 60_000 + i) for i in range(subjects)]
        record(first)
        while not _all_delivered(store):
            one_pass()
        receiver.kill()
        gone_at = time.monotonic()
        if not nobody_listens_on(port):
            raise RuntimeError("the receiver's port still accepts connections after the kill")
        down_ms = int(down_s * 1000)
        down_from = clock.ms
        events = _outage_events(first, down_from, down_ms, subjects)
        while clock.ms - down_from < down_ms:
            due = [alert for when, alert in events if when <= clock.ms]
            events = [(when, alert) for when, alert in events if when > clock.ms]
            if due:
                record(due)
            one_pass()
        if events:
            record([alert for _, alert in events])
        with store.engine.connect() as conn:
            failed = conn.scalar(select(func.coalesce(func.sum(deliveries.c.attempts), 0)))
        receiver = ReceiverProcess(port, arrivals_path)
        down_wall = time.monotonic() - gone_at
        back_at = clock.ms
        last_delivery = back_at
        for _ in range(100_000):
            if _all_delivered(store):
                break
            one_pass()
        with store.engine.connect() as conn:
            last_delivery = conn.scalar(select(func.max(deliveries.c.delivered_at))) or back_at
            dead = conn.scalar(select(func.count()).select_from(deliveries).where(deliveries.c.state == "dead"))
            first_wave = conn.scalar(select(func.count()).select_from(deliveries)
                                     .where(deliveries.c.delivered_at < down_from))
    finally:
        receiver.kill()
        notifier.close()
        store.close()

    got = [(a["alert_id"], a["status"]) for a in map(json.loads, arrivals_path.read_text().splitlines())]
    counts = Counter(got)
    wanted = {item for items in expected.values() for item in items}
    out_of_order = 0
    for order in expected.values():
        seen = [item for item in got if item in order]
        if seen != [item for item in order if item in counts]:
            out_of_order += 1
    return OutageFigures(
        down_s=down_ms / 1000, down_wall_s=round(down_wall, 2), notifications=len(wanted), delivered=len(got),
        duplicates=sum(n - 1 for n in counts.values()), lost=len(wanted - set(counts)), out_of_order=out_of_order,
        failed_attempts=int(failed) - first_wave, catch_up_s=max(0, last_delivery - back_at) / 1000,
        dead_letters=int(dead), passes=passes, wall_s=round(time.monotonic() - started, 1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    serve = sub.add_parser("receive", help="(internal) the receiver process")
    serve.add_argument("--port", type=int, required=True)
    serve.add_argument("--log", type=Path, required=True)
    parser.add_argument("--down-minutes", type=float, default=10.0, help="how long the receiver is down (default 10)")
    parser.add_argument("--subjects", type=int, default=40, help="brokers with alerts (default 40)")
    parser.add_argument("--step-s", type=float, default=2.0, help="notifier clock per pass (default 2 s)")
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
    args = parser.parse_args(argv)
    if args.command == "receive":
        receive(args.port, args.log)
        return 0
    setup_logging("ERROR")  # the notifier's own warnings (every refused attempt) would drown the figures
    with tempfile.TemporaryDirectory(prefix="fleetwatch-outage-") as tmp:
        figures = run_outage(Path(tmp), down_s=args.down_minutes * 60, subjects=args.subjects, step_s=args.step_s)
    print(figures.summary())
    if args.json:
        print(json.dumps(asdict(figures)))
    ok = figures.lost == figures.duplicates == figures.out_of_order == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
