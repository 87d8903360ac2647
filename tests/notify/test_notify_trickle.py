"""Receivers that trickle their answer (issue 27.1): each delivery attempt ends by its deadline.

A real hostile receiver process (tests/support/trickler.py) on 127.0.0.1 answers `200` and then
trickles its body a byte a second forever, or trickles its headers; the real notifier process
(`python -m streaming.notify`) delivers to it and to a healthy receiver over a real SQLite store.
Every wait is a poll with a deadline.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest
from support.paths import ROOT

from streaming.plumbing.ports import free_port
from streaming.records.alert import Alert
from streaming.store import Store
from streaming.workshop.hooks import NotifierProcess, delivery_rows, env_with, make_alert, write_config
from streaming.workshop.polling import poll

pytestmark = pytest.mark.integration

ATTEMPT_S = 2.0
SLACK_S = 1.0  # the loop's and the process's latency on a loaded machine, not a second deadline


class Trickler:
    """tests/support/trickler.py as a child process; its report lines are collected."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "support" / "trickler.py"),
                                      str(self.port)], stdout=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.opened: list[str] = []
        self.closed: list[dict] = []
        threading.Thread(target=self._read, daemon=True).start()
        poll(lambda: "ready" in self.lines, 20, "the trickling receiver to listen", interval_s=0.05)

    def _read(self) -> None:
        for line in self.proc.stdout:
            line = line.strip()
            self.lines.append(line)
            if line.startswith("{"):
                report = json.loads(line)
                if report["event"] == "open":
                    self.opened.append(report["path"])
                else:
                    self.closed.append(report)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


def test_a_trickling_receiver_fails_each_attempt_by_its_deadline(tmp_path, hook):
    hook.start()
    trickler = Trickler()
    config = write_config(tmp_path, [
        {"name": "ops", "type": "webhook", "url": hook.url()},
        {"name": "body", "type": "webhook", "url": trickler.url("/body")},
        {"name": "headers", "type": "webhook", "url": trickler.url("/headers")},
    ], delivery={"dead_letter_attempts": 3})
    store = Store(f"sqlite:///{tmp_path / 'fleet.db'}")
    now = int(time.time() * 1000)
    alerts = [make_alert("broker.fenced", cluster="c1", broker=b, starts_at=now - 10_000 + b) for b in range(8)]
    notifier = NotifierProcess(config, tmp_path / "notify.log", env_with(), "--group-wait-ms", "0",
                               "--retry-base-ms", "200", "--retry-max-ms", "400", "--timeout", str(ATTEMPT_S))
    try:
        store.record_alerts(map(Alert.from_dict, alerts[:4]))
        poll(lambda: len(hook.got()) >= 4, 20, "the first alerts at the healthy receiver", interval_s=0.05)
        # the tricklers hold attempts now; the healthy receiver still gets what comes next, at once
        poll(lambda: {"/body", "/headers"} <= set(trickler.opened), 20, "attempts in flight at the tricklers",
             interval_s=0.05)
        recorded = time.monotonic()
        store.record_alerts(map(Alert.from_dict, alerts[4:]))
        poll(lambda: len(hook.got()) >= 8, 20, "the later alerts at the healthy receiver", interval_s=0.05)
        healthy_s = time.monotonic() - recorded
        trickled = [r for r in delivery_rows(store) if r["receiver"] != "ops"]
        assert any(r["state"] == "pending" for r in trickled), "delivered meanwhile, not after the tricklers"
        # every trickled delivery: attempts that time out, retried, dead after the configured 3
        poll(lambda: all(r["state"] == "dead" for r in delivery_rows(store) if r["receiver"] != "ops"), 90,
             "the trickled deliveries to be dead letters after 3 attempts each", interval_s=0.05)
    finally:
        assert notifier.stop() == 0
        trickler.stop()

    rows = delivery_rows(store)
    for r in rows:
        if r["receiver"] == "ops":
            assert r["state"] == "delivered" and r["attempts"] == 1
        else:
            assert r["attempts"] == 3, r
            assert "gave up after 3 attempts" in r["last_error"] and "timed out" in r["last_error"], r["last_error"]
    got = [(json.loads(a["body"])["alert_id"]) for a in hook.got()]
    assert sorted(got) == sorted(a["alert_id"] for a in alerts), "each once at the healthy receiver"
    # the receiver saw every attempt end (the notifier closed the connection) within the deadline
    by_path = {p: [c["seconds"] for c in trickler.closed if c["path"] == p] for p in ("/body", "/headers")}
    print(f"attempt against the trickler: {by_path}; healthy receiver got the later alerts in {healthy_s:.2f} s")
    for path, seconds in by_path.items():
        assert len(seconds) >= 8 * 3, f"{path}: {len(seconds)} attempts"
        assert max(seconds) <= ATTEMPT_S + SLACK_S, f"{path}: an attempt lasted {max(seconds)} s"
    assert healthy_s < ATTEMPT_S * 3
    store.close()
