"""The notifier tests' real parts (no tests here): the real HTTP receiver on 127.0.0.1 whose answers
the test scripts, the notifier as a real child process and its CLI, alerts as the job writes them,
and what the store holds afterwards. Imported by the tests in tests/notify/ and tests/demo/."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import select, text

from streaming.notify import OutgoingAlert
from streaming.plumbing.ports import free_port
from streaming.plumbing.receiver import Reply, Request, WebhookReceiver
from streaming.records.alert import RULES, Alert, alert_id, queue_subject_of
from streaming.store import Store, deliveries, metadata, outbox
from streaming.workshop.paths import ROOT

__all__ = ["SECRET", "Hook", "NotifierProcess", "all_delivered", "delivery_rows", "env_with", "iso_ms", "make_alert",
           "outbox_rows", "outgoing", "rack_fleet_brokers", "resolved", "run_cli", "store_text", "write_config"]

# The webhook secret of the notifier tests: it must never show in a log, an answer or the store.
SECRET = "whsec-test-7f3a9c1e"


def iso_ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


class Hook:
    """A real HTTP receiver on 127.0.0.1 (streaming/plumbing/receiver.py) whose answers the test scripts.

    `script` holds the actions for the next requests (then `default`): ("ok",), ("status", code,
    body[, headers]), ("slow", seconds) or ("hang",): answer 200 only once `release` is set. `by_path`
    maps a path prefix to a fixed action; `decide(path, body)`, when set, chooses first (None: go on).
    A request is an *arrival* when the receiver accepts it (2xx), recorded the moment it is received.
    """

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()  # known before start(): a test may start it late (a receiver down)
        self.lock = threading.Lock()
        self.arrivals: list[dict[str, Any]] = []
        self.refused: list[dict[str, Any]] = []
        self.script: deque[tuple] = deque()
        self.by_path: dict[str, tuple] = {}
        self.decide: Callable[[str, bytes], tuple | None] | None = None
        self.default: tuple = ("ok",)
        self.in_flight = threading.Event()
        self.hung: dict[str, Any] | None = None
        self.release = threading.Event()
        self.server: WebhookReceiver | None = None

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def _action(self, path: str, body: bytes) -> tuple:
        with self.lock:
            if self.decide is not None and (chosen := self.decide(path, body)) is not None:
                return chosen
            for prefix, action in self.by_path.items():
                if path.startswith(prefix):
                    return action
            return self.script.popleft() if self.script else self.default

    def _answer(self, request: Request) -> Reply:
        received = {"path": request.path, "headers": dict(request.headers), "body": request.body, "t": request.t}
        action = self._action(request.path, request.body)
        code, reply = 200, b'{"status":"success"}'
        if action[0] == "status":
            code, reply = action[1], (action[2] if len(action) > 2 else "").encode()
        with self.lock:
            (self.arrivals if code < 300 else self.refused).append(received)
        if action[0] == "slow":
            time.sleep(action[1])  # the slow endpoint itself
        elif action[0] == "hang":
            self.hung = received
            self.in_flight.set()
            self.release.wait(30)
        extra = action[3] if action[0] == "status" and len(action) > 3 else {}
        return Reply(code, reply, {"Content-Type": "application/json", **extra})

    def start(self) -> Hook:
        self.server = WebhookReceiver(self._answer, port=self.port).start()
        return self

    def stop(self) -> None:
        self.release.set()
        if self.server is not None:
            self.server.stop()

    def got(self, prefix: str = "/") -> list[dict[str, Any]]:
        with self.lock:
            return [a for a in self.arrivals if a["path"].startswith(prefix)]


def make_alert(rule: str, *, cluster: str | None = "clusterA", broker: int | None = None, target: str | None = None,
               endpoint: str | None = None, starts_at: int, ends_at: int | None = None,
               details: dict | None = None, names: dict[str, Any] | None = None) -> dict[str, Any]:
    """An alert object as the job writes it; `names`: its issue-43 fields (cluster_name, tags,
    broker_host, rack), none by default (an alert as an older job wrote it)."""
    target = target or (f"tgt-{cluster}" if cluster else None)
    alert = {"schema": "fleetwatch.alert/v1", "alert_id": "", "rule": rule, "status": "firing",
             "severity": RULES[rule][0], "cluster_id": cluster, "target": target,
             "broker_id": broker, "endpoint": endpoint, "starts_at": starts_at, "ends_at": None,
             "summary": f"{rule} on {cluster} broker {broker}", "details": details or {}, **(names or {})}
    alert["alert_id"] = alert_id(rule, queue_subject_of(alert), starts_at)
    if ends_at is not None:
        return resolved(alert, ends_at)
    return alert


def resolved(alert: dict[str, Any], ends_at: int) -> dict[str, Any]:
    return {**alert, "status": "resolved", "ends_at": ends_at}


def outgoing(alert: dict[str, Any]) -> OutgoingAlert:
    """An alert object as a receiver is handed it: the alert, and the object as the store reads it back."""
    stored = json.loads(json.dumps(alert))
    return OutgoingAlert(Alert.from_dict(stored), stored)


def rack_fleet_brokers(now: int) -> list[dict[str, Any]]:
    """The store's brokers of a five-cluster fleet where rack r7 is evidence of a fleet incident: c0
    broker 1, c1 broker 2 and c3 broker 1 are in it; c2 and c4 are not (racks of their own)."""
    racks = {"c0": ("r7", "a0", "b0"), "c1": ("a1", "r7", "b1"), "c2": ("a2", "b2", "d2"), "c3": ("r7", "x3", "y3"),
             "c4": ("a4", "b4", "d4")}
    return [{"cluster_id": c, "broker_id": b, "state": "ONLINE", "fenced": False, "broker_epoch": 1,
             "last_heartbeat_ms": now, "last_answer_ms": now, "rack": rack, "endpoints": [f"{c}-b{b}.dc1.example:9092"],
             "updated_ms": now} for c, rs in racks.items() for b, rack in enumerate(rs, 1)]


def write_config(tmp_path: Path, receivers: list[dict], routes: list[dict] | None = None,
                 store_url: str | None = None, delivery: dict | None = None, links: dict | None = None,
                 **extra) -> Path:
    """`links`: `alerting.dashboard_url` and `alerting.runbook_base_url`, when given."""
    alerting = {"receivers": receivers, "routes": routes or [], **({"delivery": delivery} if delivery else {}),
                **(links or {})}
    cfg = {"store": {"url": store_url or f"sqlite:///{tmp_path / 'fleet.db'}"}, "alerting": alerting, **extra}
    path = tmp_path / "fleetwatch.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def env_with(**values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FW_", "PYTEST"))}
    env.update(values)
    env["PYTHONPATH"] = str(ROOT)
    return env


class NotifierProcess:
    """`python -m streaming.notify notify …` as a real child process; stderr (JSON logs) kept."""

    def __init__(self, config: Path, log_path: Path, env: dict[str, str], *extra: str,
                 prefix: tuple[str, ...] = ()) -> None:
        """`prefix`: a command that execs its arguments (the pid stays the notifier's), e.g. one
        that gives it a host of its own (tests/notify/test_notify_lease_clocks.py)."""
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "streaming.notify", "notify", "--config", str(config), "--interval-ms",
             "100", *extra], cwd=ROOT, env=env, stdout=self._log, stderr=self._log)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self._log.close()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(20)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self._log.close()
        return code


def run_cli(*args: str, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "streaming.notify", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def delivery_rows(store: Store, receiver: str | None = None) -> list[dict[str, Any]]:
    stmt = select(deliveries).order_by(deliveries.c.id)
    if receiver:
        stmt = stmt.where(deliveries.c.receiver == receiver)
    with store.engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(stmt)]


def outbox_rows(store: Store) -> list[dict[str, Any]]:
    with store.engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(select(outbox).order_by(outbox.c.id))]


def store_text(store: Store) -> str:
    """Every value of every table, as one string (to look for leaked secrets)."""
    out = []
    with store.engine.connect() as conn:
        for table in metadata.sorted_tables:
            for row in conn.execute(select(table)):
                out.append(repr(tuple(row)))
        if store.engine.dialect.name == "sqlite":
            out += [repr(r) for r in conn.execute(text("SELECT * FROM sqlite_master"))]
    return "\n".join(out)


def all_delivered(store: Store) -> bool:
    rows = outbox_rows(store)
    return bool(rows) and all(r["delivered_at"] is not None for r in rows)

