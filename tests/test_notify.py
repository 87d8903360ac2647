"""`fleetwatch notify` / `fleetwatch silence` against real HTTP receivers on 127.0.0.1.

The notifier runs as a real process (`python -m streaming.notify`) over a real SQLite store
written through `Store.record_alerts`, the way the Spark job and `replay` write it. Every wait
is a poll with a deadline.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from sqlalchemy import select, text

from streaming.alert import RULES, Alert, alert_id, queue_subject_of
from streaming.config import ConfigError, FleetwatchConfig, Route
from streaming.notify.delivery import Notifier, NotifyOptions
from streaming.notify.receivers import (
    ALERTMANAGER_FIRING_TTL_MS,
    AlertmanagerReceiver,
    HttpRequest,
    Item,
    PagerDutyReceiver,
    SlackReceiver,
    sign,
    verify_signature,
)
from streaming.notify.routing import Router
from streaming.redact import Scrubber, redact_text, redact_url
from streaming.store import Store, deliveries, metadata, outbox, parse_duration, silences

try:  # the PostgreSQL server of the store and deploy tests
    from test_deploy_support import PostgresServer, pg_binaries
except ImportError:  # pragma: no cover - support module missing
    PostgresServer = pg_binaries = None

ROOT = Path(__file__).resolve().parents[1]
SECRET = "whsec-test-7f3a9c1e"


# -- helpers ----------------------------------------------------------------------------------

def wait_for(predicate: Callable[[], Any], timeout: float, what: str, every: float = 0.05) -> Any:
    """Poll until predicate() is truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


def iso_ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Hook:
    """A real HTTP receiver on 127.0.0.1 whose answers the test scripts.

    `script` holds the actions for the next requests (then `default`): ("ok",), ("status", code,
    body), ("slow", seconds) or ("hang",): answer 200 only once `release` is set. `by_path` maps a
    path prefix to a fixed action; `decide(path, body)`, when set, chooses first (None: go on). A
    request is an *arrival* when the receiver accepts it (2xx), recorded the moment it is received.
    """

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
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
        self.server: ThreadingHTTPServer | None = None

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

    def start(self) -> Hook:
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                if len(body) < length:
                    return  # the sender died mid-request (a killed notifier): nothing was received
                request = {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
                           "body": body, "t": time.monotonic()}
                action = hook._action(self.path, body)
                code, reply = 200, b'{"status":"success"}'
                if action[0] == "status":
                    code, reply = action[1], (action[2] if len(action) > 2 else "").encode()
                with hook.lock:
                    (hook.arrivals if code < 300 else hook.refused).append(request)
                if action[0] == "slow":
                    time.sleep(action[1])
                elif action[0] == "hang":
                    hook.hung = request
                    hook.in_flight.set()
                    hook.release.wait(30)
                extra = action[3] if action[0] == "status" and len(action) > 3 else {}
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    for name, value in extra.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(reply)))
                    self.end_headers()
                    self.wfile.write(reply)
                except OSError:
                    pass  # the client gave up (timeout, or it was killed)

        class Server(ThreadingHTTPServer):
            allow_reuse_address = True
            daemon_threads = True

        self.server = Server(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.release.set()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def got(self, prefix: str = "/") -> list[dict[str, Any]]:
        with self.lock:
            return [a for a in self.arrivals if a["path"].startswith(prefix)]


@pytest.fixture(scope="module")
def postgres_server():
    bin_dir = pg_binaries() if pg_binaries is not None else None
    if bin_dir is None:
        pytest.skip("PostgreSQL binaries (initdb, pg_ctl) not installed: apt-get install postgresql")
    server = PostgresServer(bin_dir).start()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    """The notifier over both stores: a SQLite file and a fresh database on a real PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'fleet.db'}"
    return request.getfixturevalue("postgres_server").create_database("notify")


@pytest.fixture
def hook():
    h = Hook()
    yield h
    h.stop()


def make_alert(rule: str, *, cluster: str | None = "clusterA", broker: int | None = None, target: str | None = None,
               endpoint: str | None = None, starts_at: int, ends_at: int | None = None,
               details: dict | None = None) -> dict[str, Any]:
    target = target or (f"tgt-{cluster}" if cluster else None)
    alert = {"schema": "fleetwatch.alert/v1", "alert_id": "", "rule": rule, "status": "firing",
             "severity": RULES[rule][0], "cluster_id": cluster, "target": target,
             "broker_id": broker, "endpoint": endpoint, "starts_at": starts_at, "ends_at": None,
             "summary": f"{rule} on {cluster} broker {broker}", "details": details or {}}
    alert["alert_id"] = alert_id(rule, queue_subject_of(alert), starts_at)
    if ends_at is not None:
        return resolved(alert, ends_at)
    return alert


def resolved(alert: dict[str, Any], ends_at: int) -> dict[str, Any]:
    return {**alert, "status": "resolved", "ends_at": ends_at}


def write_config(tmp_path: Path, receivers: list[dict], routes: list[dict] | None = None,
                 store_url: str | None = None, **extra) -> Path:
    cfg = {"store": {"url": store_url or f"sqlite:///{tmp_path / 'fleet.db'}"},
           "alerting": {"receivers": receivers, "routes": routes or []}, **extra}
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

    def __init__(self, config: Path, log_path: Path, env: dict[str, str], *extra: str) -> None:
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streaming.notify", "notify", "--config", str(config), "--interval-ms", "100",
             *extra], cwd=ROOT, env=env, stdout=self._log, stderr=self._log)

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


# -- units ------------------------------------------------------------------------------------

def test_signature_roundtrip_and_tamper():
    body = b'{"alert_id":"x"}'
    header = sign(SECRET, body, 1_763_800_000)
    t, v1 = header.split(",")
    assert t == "t=1763800000" and re.fullmatch(r"v1=[0-9a-f]{64}", v1)
    assert verify_signature(SECRET, body, header, now=1_763_800_000 + 10)
    assert not verify_signature(SECRET, body + b" ", header, now=1_763_800_000)
    assert not verify_signature("other", body, header, now=1_763_800_000)
    assert not verify_signature(SECRET, body, header, now=1_763_800_000 + 3600)
    assert not verify_signature(SECRET, body, header), "the wall clock is years later: a replay"


def test_redaction():
    assert redact_url("https://user:pw@hooks.example/x?token=abc&v=2") == "https://***@hooks.example/***"
    assert redact_url("https://hooks.slack.com/services/T0/B0/XOXB") == "https://hooks.slack.com/***"
    assert redact_url("http://127.0.0.1:9093") == "http://127.0.0.1:9093"
    assert redact_url("http://[::1]:9093/") == "http://[::1]:9093"
    said = redact_text("POST to https://bob:hunter22@h.example/p?k=s3cr3t failed; see http://ok.example/a")
    assert "hunter22" not in said and "s3cr3t" not in said and "http://ok.example/a" in said
    assert Scrubber(["routing-key-123"]).clean("bad key routing-key-123") == "bad key ***"


def test_parse_duration():
    assert parse_duration("2h") == 7_200_000
    assert parse_duration("1h30m") == 5_400_000
    assert parse_duration("45s") == 45_000
    for bad in ("", "2", "h", "2x", "-1h", "0m"):
        with pytest.raises(ConfigError):
            parse_duration(bad)


def test_routes_are_a_union_with_patterns_and_cluster_tags():
    config = FleetwatchConfig.model_validate({"clusters": [{"name": "pay", "tags": {"env": "prod"}}]})
    router = Router([Route(receiver="pager", match={"severity": ["critical"], "env": ["prod"]}),
                     Route(receiver="fence", match={"rule": ["broker.fen*"]}),
                     Route(receiver="ops")], ["pager", "fence", "ops", "unused"], config.clusters)
    crit = make_alert("broker.heartbeat_lost", cluster="c1", target="pay", broker=1, starts_at=1)
    assert router.receivers_for(crit) == ["pager", "ops"]
    assert router.receivers_for({**crit, "target": "staging"}) == ["ops"]
    assert router.receivers_for(make_alert("broker.fenced", cluster="c1", broker=1, starts_at=1)) == ["fence", "ops"]
    assert Router([], ["a", "b"]).receivers_for(crit) == ["a", "b"]


def _notifier(tmp_path: Path, handler: Callable[[httpx.Request], httpx.Response], **opts) -> Notifier:
    config = FleetwatchConfig.model_validate({"alerting": {"receivers": [
        {"name": "ops", "type": "webhook", "url": "http://u:pw-secret@127.0.0.1:1/x"}]}})
    return Notifier(config, Store(f"sqlite:///{tmp_path / 'u.db'}"), NotifyOptions(**opts), env={},
                    transport=httpx.MockTransport(handler))


def test_response_classes_and_backoff(tmp_path):
    answers = iter([httpx.Response(429, headers={"Retry-After": "7"}), httpx.Response(503, text="busy"),
                    httpx.Response(404, text="no such hook"), httpx.Response(302, headers={"Location": "/y"}),
                    httpx.Response(202)])

    def handler(request):
        return next(answers)

    notifier = _notifier(tmp_path, handler, retry_base_ms=1000, retry_max_ms=60_000)
    receiver = notifier.receivers["ops"]
    req = HttpRequest(receiver.url, b"{}")
    too_many = notifier.sender.send(receiver, req)
    assert not too_many.ok and not too_many.permanent and too_many.retry_after_ms == 7000
    busy = notifier.sender.send(receiver, req)
    assert not busy.permanent and busy.error == "HTTP 503 Service Unavailable: busy"
    gone = notifier.sender.send(receiver, req)
    assert gone.permanent and "404" in gone.error and "no such hook" in gone.error
    moved = notifier.sender.send(receiver, req)
    assert moved.permanent and "redirect" in moved.error
    assert notifier.sender.send(receiver, req).ok

    def refuse(request):
        raise httpx.ConnectError("connection refused to http://u:pw-secret@127.0.0.1:1/x")

    refusing = _notifier(tmp_path, refuse)
    down = refusing.sender.send(receiver, req)
    assert not down.permanent and "pw-secret" not in down.error and "ConnectError" in down.error
    refusing.close()
    for attempts in range(1, 12):
        delay = notifier.sender.backoff_ms(attempts)
        step = min(60_000, 1000 * 2 ** (attempts - 1))
        assert step / 2 <= delay <= step
    assert notifier.sender.backoff_ms(1, retry_after_ms=7000) >= 7000
    assert notifier.sender.backoff_ms(1, retry_after_ms=10**9) <= 60_000
    notifier.close()


class FakeClock:
    """Wall clock under the test's control (a little ahead, so rows just recorded are due)."""

    def __init__(self) -> None:
        self.now = time.time() + 5

    def __call__(self) -> float:
        return self.now


def test_a_down_receiver_is_probed_not_hammered(tmp_path):
    calls = []

    def refuse(request):
        calls.append(request)
        raise httpx.ConnectError("connection refused")

    clock = FakeClock()
    notifier = _notifier(tmp_path, refuse, retry_base_ms=1000, concurrency=4)
    notifier._clock = clock
    store = notifier.store
    store.record_alerts(map(Alert.from_dict, [make_alert("broker.fenced", cluster=f"c{i}", broker=1, starts_at=1000 + i)
                         for i in range(20)]))
    notifier.run(once=True)
    assert len(calls) == 20  # the first pass tries everything that is due
    notifier.run(once=True)
    assert len(calls) == 20  # paused: the receiver as a whole backs off
    clock.now += 3600
    notifier.run(once=True)
    assert len(calls) == 24  # then a probe of `concurrency` requests, not the backlog
    assert {r["state"] for r in delivery_rows(store)} == {"pending"}
    notifier.close()


def test_alertmanager_refresh_keeps_open_alerts_alive_and_only_those(tmp_path):
    posts: list[list[dict]] = []

    def accept(request):
        posts.append(json.loads(request.content))
        return httpx.Response(200)

    config = FleetwatchConfig.model_validate({"alerting": {"receivers": [
        {"name": "am", "type": "alertmanager", "url": "http://alertmanager.invalid:9093"}]}})
    clock = FakeClock()
    store = Store(f"sqlite:///{tmp_path / 'am.db'}")
    notifier = Notifier(config, store, NotifyOptions(group_wait_ms=0, alertmanager_refresh_ms=60_000), env={},
                        clock=clock, transport=httpx.MockTransport(accept))
    now = int(clock.now * 1000)
    first = make_alert("broker.fenced", cluster="c1", broker=1, starts_at=now - 5000)
    second = make_alert("broker.fenced", cluster="c1", broker=2, starts_at=now - 4000)
    store.record_alerts(map(Alert.from_dict, [first, second]))
    notifier.run(once=True)
    assert [[e["annotations"]["alert_id"] for e in post] for post in posts] == [[first["alert_id"],
                                                                                 second["alert_id"]]]
    store.record_alerts(map(Alert.from_dict, [resolved(first, now)]))
    clock.now += 61
    notifier.run(once=True)
    resolution, refresh = posts[1:]
    assert [e["annotations"]["alert_id"] for e in resolution] == [first["alert_id"]]
    assert iso_ms(resolution[0]["endsAt"]) == now  # its ends_at
    assert iso_ms(posts[0][1]["endsAt"]) == now + ALERTMANAGER_FIRING_TTL_MS
    assert [e["annotations"]["alert_id"] for e in refresh] == [second["alert_id"]]
    assert iso_ms(refresh[0]["endsAt"]) == now + 61_000 + ALERTMANAGER_FIRING_TTL_MS  # pushed forward
    notifier.close()
    store.close()


def test_slack_and_pagerduty_messages():
    cfg = FleetwatchConfig.model_validate({"alerting": {"receivers": [
        {"name": "chat", "type": "slack", "url": "http://127.0.0.1:1/s"},
        {"name": "pager", "type": "pagerduty", "routing_key_env": "PD"}]}}).alerting.receivers
    slack, pager = SlackReceiver(cfg[0], {}), PagerDutyReceiver(cfg[1], {"PD": "key-12345"})
    alert = {**make_alert("connection.misrouted", cluster="c1", endpoint="b1:9092", starts_at=1_763_800_000_000),
             "summary": "b1:9092 answers as <cluster c2> & node 4"}
    text = json.loads(slack.request([Item(json.dumps(alert), alert)], 0).body)["text"]
    assert "&lt;cluster c2&gt; &amp; node 4" in text and "*[FIRING]* critical `connection.misrouted`" in text
    assert pager.url == "https://events.pagerduty.com/v2/enqueue"
    trigger = json.loads(pager.request([Item("", alert)], 0).body)
    assert trigger["event_action"] == "trigger" and trigger["dedup_key"] == alert["alert_id"]
    assert trigger["payload"]["timestamp"] == "2025-11-22T08:26:40.000Z"
    assert trigger["payload"]["component"] == "b1:9092" and trigger["payload"]["source"] == "tgt-c1"
    resolve = json.loads(pager.request([Item("", resolved(alert, 1_763_800_060_000))], 0).body)
    assert resolve == {"routing_key": "key-12345", "dedup_key": alert["alert_id"], "event_action": "resolve"}
    with pytest.raises(ConfigError, match=r"\$PD, which is not set"):
        PagerDutyReceiver(cfg[1], {})


def test_alertmanager_entry_times():
    receiver_cfg = FleetwatchConfig.model_validate({"alerting": {"receivers": [
        {"name": "am", "type": "alertmanager", "url": "http://127.0.0.1:9093/"}]}}).alerting.receivers[0]
    am = AlertmanagerReceiver(receiver_cfg, {})
    assert am.url == "http://127.0.0.1:9093/api/v2/alerts"
    now = 1_763_800_100_000
    firing = make_alert("broker.partitioned", cluster="c1", broker=3, starts_at=now - 60_000)
    entry = am.alert_entry(firing, now)
    assert entry["labels"] == {"alertname": "broker.partitioned", "rule": "broker.partitioned",
                               "severity": "critical", "cluster_id": "c1", "target": "tgt-c1", "broker": "3"}
    assert entry["startsAt"] == "2025-11-22T08:27:20.000Z" and entry["endsAt"] > entry["startsAt"]
    # a resolution stamped in the future (clock skew) must not keep it firing
    late = am.alert_entry(resolved(firing, now + 3_600_000), now)
    assert late["endsAt"] == "2025-11-22T08:28:20.000Z"


# -- the whole notifier, as a process ---------------------------------------------------------

def test_nothing_lost_through_outage_errors_slowness_and_a_kill(tmp_path, hook, store_url):
    """Receiver down, then 500s, then slow; the notifier is SIGKILLed mid-delivery and restarted."""
    config = write_config(tmp_path, [{"name": "ops", "type": "webhook", "url": hook.url(),
                                      "secret_env": "FW_WEBHOOK_SECRET"}], store_url=store_url)
    store = Store(store_url)
    env = env_with(FW_WEBHOOK_SECRET=SECRET)
    t0 = int(time.time() * 1000) - 600_000
    # 6 clusters x 3 brokers: per broker, incident A fires and resolves, then (for half) incident B.
    firing_a = [make_alert("broker.heartbeat_lost", cluster=f"c{c}", broker=b, starts_at=t0 + 1000 * (3 * c + b))
                for c in range(6) for b in range(3)]
    firing_b = [make_alert("broker.heartbeat_lost", cluster=a["cluster_id"], broker=a["broker_id"],
                           starts_at=a["starts_at"] + 200_000) for a in firing_a[::2]]
    wave1 = firing_a
    wave2 = [resolved(a, a["starts_at"] + 100_000) for a in firing_a] + firing_b
    wave3 = [resolved(a, a["starts_at"] + 100_000) for a in firing_b]
    expected_order: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for alert in wave1 + wave2 + wave3:
        expected_order.setdefault((alert["rule"], queue_subject_of(alert)), []).append(
            (alert["alert_id"], alert["status"]))

    log1, log2 = tmp_path / "notify-1.log", tmp_path / "notify-2.log"
    opts = ("--group-wait-ms", "0", "--retry-base-ms", "100", "--retry-max-ms", "800", "--timeout", "2")
    store.record_alerts(map(Alert.from_dict, wave1))
    first = NotifierProcess(config, log1, env, *opts)
    try:
        # 1. The receiver is down: connection errors are recorded and retried with backoff.
        wait_for(lambda: any(r["attempts"] >= 2 and "Connect" in (r["last_error"] or "")
                             for r in delivery_rows(store)), 20, "retries against the down receiver")
        assert not any(r["delivered_at"] for r in outbox_rows(store))
        # 2. It comes up answering 500 a few times, then slowly (longer than the notifier's timeout).
        hook.script.extend([("status", 500, "oops")] * 6 + [("slow", 3.0)] * 2)
        hook.start()
        wait_for(lambda: len(hook.got()) >= 12, 30, "deliveries after the receiver came up")
        store.record_alerts(map(Alert.from_dict, wave2))
        # 3. One request hangs in the receiver; the notifier is killed while it is in flight.
        with hook.lock:
            hook.script.append(("hang",))
        wait_for(hook.in_flight.is_set, 20, "a request in flight")
        first.kill()
        hung = hook.hung
        hook.release.set()
        store.record_alerts(map(Alert.from_dict, wave3))  # written while no notifier runs
        second = NotifierProcess(config, log2, env, *opts)
        try:
            wait_for(lambda: all_delivered(store), 40, "every outbox row delivered after the restart")
        finally:
            assert second.stop() == 0
    finally:
        if first.proc.poll() is None:
            first.kill()

    arrivals = hook.got("/hook")
    got = [(json.loads(a["body"])["alert_id"], json.loads(a["body"])["status"]) for a in arrivals]
    expected = {item for items in expected_order.values() for item in items}
    assert set(got) == expected, "every (alert_id, status) arrives"
    duplicates = len(got) - len(set(got))
    assert duplicates <= 10, f"{duplicates} duplicates"
    # the request in flight at the kill was sent again by the restarted notifier
    hung_key = (json.loads(hung["body"])["alert_id"], json.loads(hung["body"])["status"])
    assert got.count(hung_key) >= 2
    now_s = time.time()
    for a in arrivals:
        assert verify_signature(SECRET, a["body"], a["headers"]["x-fleetwatch-signature"], now=now_s), "signed"
        body = json.loads(a["body"])
        assert a["headers"]["x-fleetwatch-alert-id"] == body["alert_id"]
        assert body["schema"] == "fleetwatch.alert/v1"
    # in order per (rule, subject): repeats only of the current item, never of an earlier one
    for subject, order in expected_order.items():
        seen = [order.index(item) for item in got if item in order]
        assert seen == sorted(seen), f"out of order for {subject}: {seen}"
        assert sorted(set(seen)) == list(range(len(order)))
    rows = delivery_rows(store)
    assert {r["state"] for r in rows} == {"delivered"} and len(rows) == len(expected)
    errors = " ".join(r["last_error"] or "" for r in rows)
    assert "ConnectError" in errors and "HTTP 500" in errors and "timed out" in errors
    for r in outbox_rows(store):
        assert r["attempts"] >= 1 and r["delivered_at"] >= r["created_at"]
    logs = log1.read_text() + log2.read_text()
    assert "took over the notifier lease" in logs
    assert SECRET not in logs and SECRET not in store_text(store)
    for line in logs.splitlines():
        json.loads(line)  # structured logs only
    store.close()


def test_dead_letter_routing_pagerduty_and_requeue(tmp_path, hook, store_url):
    """A 4xx is a dead letter with its reason; routes pick receivers; PagerDuty Events v2 trigger/resolve."""
    hook.by_path["/reject"] = ("status", 400, '{"message":"Invalid payload: missing field summary"}')
    hook.start()
    config = write_config(tmp_path, [
        {"name": "ops", "type": "webhook", "url": hook.url("/hook"), "secret_env": "FW_WEBHOOK_SECRET"},
        {"name": "strict", "type": "webhook", "url": hook.url("/reject")},
        {"name": "pager", "type": "pagerduty", "url": hook.url("/v2/enqueue"), "routing_key_env": "FW_PD_KEY"},
    ], routes=[{"receiver": "pager", "match": {"severity": ["critical"]}},
               {"receiver": "strict", "match": {"rule": ["cluster.*"]}},
               {"receiver": "ops"}], store_url=store_url)
    env = env_with(FW_WEBHOOK_SECRET=SECRET, FW_PD_KEY="pd-routing-key-0042")
    store = Store(store_url)
    now = int(time.time() * 1000)
    crit = make_alert("cluster.no_controller", cluster="c9", starts_at=now - 30_000)
    warn = make_alert("broker.fenced", cluster="c9", broker=2, starts_at=now - 20_000)
    store.record_alerts(map(Alert.from_dict, [crit, warn]))
    store.record_alerts(map(Alert.from_dict, [resolved(crit, now - 1000)]))
    once = ("notify", "--config", str(config), "--once", "--retry-base-ms", "50")

    done = run_cli(*once, env=env)
    assert "dead" in done.stdout
    # pager: the critical alert only, trigger then resolve, deduplicated on alert_id
    events = [json.loads(a["body"]) for a in hook.got("/v2/enqueue")]
    assert [(e["event_action"], e["dedup_key"]) for e in events] == [("trigger", crit["alert_id"]),
                                                                    ("resolve", crit["alert_id"])]
    assert events[0]["routing_key"] == "pd-routing-key-0042"
    assert events[0]["payload"]["severity"] == "critical" and events[0]["payload"]["class"] == "cluster.no_controller"
    assert events[0]["payload"]["custom_details"]["alert_id"] == crit["alert_id"]
    # ops: everything
    assert sorted((json.loads(a["body"])["alert_id"], json.loads(a["body"])["status"]) for a in hook.got("/hook")) \
        == sorted([(crit["alert_id"], "firing"), (warn["alert_id"], "firing"), (crit["alert_id"], "resolved")])
    # strict: refused with 400 -> dead letters with the reason, tried once each, never retried
    strict = delivery_rows(store, "strict")
    assert len(strict) == 2 and {r["state"] for r in strict} == {"dead"} and all(r["dead_letter"] for r in strict)
    assert all(r["attempts"] == 1 for r in strict)
    assert "HTTP 400 Bad Request" in strict[0]["last_error"] and "missing field summary" in strict[0]["last_error"]
    boxed = {(r["alert_id"], r["status"]): r for r in outbox_rows(store)}
    assert boxed[(crit["alert_id"], "firing")]["delivered_at"] is None
    assert boxed[(crit["alert_id"], "firing")]["last_error"].startswith("dead letter: strict: HTTP 400")
    assert boxed[(warn["alert_id"], "firing")]["delivered_at"] is not None
    # a second pass does not retry dead letters
    run_cli(*once, env=env)
    assert len(hook.refused) == 2
    # after fixing the receiver, --requeue-dead sends them again
    hook.by_path.clear()
    run_cli(*once, "--requeue-dead", env=env)
    assert {r["state"] for r in delivery_rows(store)} == {"delivered"}
    assert all(r["delivered_at"] is not None for r in outbox_rows(store))
    assert "pd-routing-key-0042" not in store_text(store)
    assert "pd-routing-key-0042" not in done.stderr and SECRET not in done.stderr
    store.close()


def test_silences(tmp_path, hook):
    hook.start()
    config = write_config(tmp_path, [{"name": "ops", "type": "webhook", "url": hook.url(),
                                      "secret_env": "FW_WEBHOOK_SECRET"}])
    env = env_with(FW_WEBHOOK_SECRET=SECRET)
    store = Store(f"sqlite:///{tmp_path / 'fleet.db'}")
    cfg = ("--config", str(config))
    added = run_cli("silence", "add", *cfg, "--cluster", "clusterA", "--rule", "broker.*", "--for", "2h",
                    "--reason", "rolling restart, runbook https://bob:hunter22@wiki.example/rr", "--author", "sre",
                    env=env)
    silence_id = re.search(r"silence ([0-9a-f]{12}) added", added.stdout)[1]
    listed = run_cli("silence", "list", *cfg, env=env).stdout
    assert silence_id in listed and "cluster=clusterA rule=broker.*" in listed and "active" in listed
    assert "https://***@wiki.example/rr" in listed and "hunter22" not in listed + added.stdout
    assert "hunter22" not in store_text(store)

    now = int(time.time() * 1000)
    quiet = make_alert("broker.fenced", cluster="clusterA", broker=1, starts_at=now - 5000)
    other_rule = make_alert("cluster.no_controller", cluster="clusterA", starts_at=now - 5000)
    other_cluster = make_alert("broker.fenced", cluster="clusterB", broker=1, starts_at=now - 5000)
    store.record_alerts(map(Alert.from_dict, [quiet, other_rule, other_cluster]))
    once = ("notify", *cfg, "--once")
    assert "1 silenced" in run_cli(*once, env=env).stdout
    got = {json.loads(a["body"])["alert_id"] for a in hook.got()}
    assert got == {other_rule["alert_id"], other_cluster["alert_id"]}
    row = next(r for r in delivery_rows(store) if r["alert_id"] == quiet["alert_id"])
    assert row["state"] == "held" and row["silence_id"] == silence_id and row["attempts"] == 0

    # the silence is expired by hand while quiet still fires: quiet is paged at the next pass, then
    # its resolution (recorded after the silence ended); a new incident is delivered too
    assert f"silence {silence_id} expired" in run_cli("silence", "expire", *cfg, silence_id[:6], env=env).stdout
    assert run_cli("silence", "list", *cfg, env=env).stdout.strip() == "no active silences"
    assert "expired" in run_cli("silence", "list", *cfg, "--all", env=env).stdout
    again = make_alert("broker.fenced", cluster="clusterA", broker=1, starts_at=now - 1000)
    store.record_alerts(map(Alert.from_dict, [resolved(quiet, now - 2000), resolved(other_rule, now - 2000), again]))
    run_cli(*once, env=env)
    got = [(json.loads(a["body"])["alert_id"], json.loads(a["body"])["status"]) for a in hook.got()]
    assert got.index((quiet["alert_id"], "firing")) < got.index((quiet["alert_id"], "resolved"))
    assert (other_rule["alert_id"], "resolved") in got and (again["alert_id"], "firing") in got
    assert all(r["delivered_at"] is not None for r in outbox_rows(store))
    with store.engine.connect() as conn:
        assert conn.execute(select(silences.c.expired_at)).scalar_one() is not None
    # bad input: one line, non-zero
    bad = run_cli("silence", "add", *cfg, "--for", "2h", "--reason", "x", env=env, check=False)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "at least one of" in bad.stderr
    assert run_cli("silence", "expire", *cfg, "ffffffffffff", env=env, check=False).returncode == 2
    store.close()


def test_storm_is_grouped_for_slack_but_not_for_webhooks(tmp_path, hook):
    hook.start()
    slack_url = hook.url("/services/T000/B000/XOXB-s3cr3t-slack-path")
    config = write_config(tmp_path, [{"name": "chat", "type": "slack", "url_env": "FW_SLACK_URL"},
                                     {"name": "ops", "type": "webhook", "url": hook.url("/hook"),
                                      "secret_env": "FW_WEBHOOK_SECRET"}])
    env = env_with(FW_SLACK_URL=slack_url, FW_WEBHOOK_SECRET=SECRET)
    store = Store(f"sqlite:///{tmp_path / 'fleet.db'}")
    now = int(time.time() * 1000)
    storm = [make_alert(rule, cluster="stormy", broker=b, starts_at=now - 10_000 + b)
             for b in range(4) for rule in ("broker.heartbeat_lost", "broker.partitioned")]
    calm = [make_alert("broker.fenced", cluster="calm", broker=1, starts_at=now - 9000)]
    log = tmp_path / "notify.log"
    proc = NotifierProcess(config, log, env, "--group-wait-ms", "2500")
    try:
        store.record_alerts(map(Alert.from_dict, storm[:5]))
        store.record_alerts(map(Alert.from_dict, storm[5:] + calm))

        def slack_ids():
            return {aid for m in hook.got("/services/") for aid in re.findall(r"alert ([0-9a-f]{32})",
                                                                              json.loads(m["body"])["text"])}

        wait_for(lambda: slack_ids() >= {a["alert_id"] for a in storm + calm}, 20, "the grouped Slack messages")
        wait_for(lambda: len(hook.got("/hook")) >= 9, 20, "the webhook deliveries")
        messages = [json.loads(m["body"])["text"] for m in hook.got("/services/")]
        assert len(messages) == 2, messages
        big = next(m for m in messages if "stormy" in m)
        assert big.startswith("*8 fleetwatch alerts for tgt-stormy* (8 firing)") and big.count("\n• ") == 8
        assert len(hook.got("/hook")) == 9  # webhooks get one request per alert
        # the storm's resolutions: one more grouped message
        store.record_alerts(map(Alert.from_dict, [resolved(a, now) for a in storm]))
        wait_for(lambda: len(hook.got("/services/")) == 3 and all_delivered(store), 20, "the resolved group")
        assert "(8 resolved)" in json.loads(hook.got("/services/")[-1]["body"])["text"]
    finally:
        assert proc.stop() == 0
    logs = log.read_text()
    assert "XOXB-s3cr3t-slack-path" not in logs and "XOXB-s3cr3t-slack-path" not in store_text(store)
    assert "(from $FW_SLACK_URL)" in logs
    store.close()


def test_credentials_in_urls_are_redacted_everywhere(tmp_path, hook):
    hook.script.extend([("status", 503, "try later", {"Retry-After": "0"})] * 2)
    hook.start()
    url = f"http://fw:pa55w0rd-xyz@127.0.0.1:{hook.port}/auth?token=tok-abcdef"
    config = write_config(tmp_path, [{"name": "ops", "type": "webhook", "url": url}])
    env = env_with()
    store = Store(f"sqlite:///{tmp_path / 'fleet.db'}")
    store.record_alerts(map(Alert.from_dict, [make_alert("endpoint.collision", cluster="c1", endpoint="b1:9092",
                                    starts_at=int(time.time() * 1000))]))
    log = tmp_path / "notify.log"
    proc = NotifierProcess(config, log, env, "--retry-base-ms", "50", "--group-wait-ms", "0")
    try:
        wait_for(lambda: all_delivered(store), 20, "delivery after two 503s")
    finally:
        assert proc.stop() == 0
    (arrival,) = hook.got("/auth")
    assert arrival["headers"]["authorization"] == "Basic " + base64.b64encode(b"fw:pa55w0rd-xyz").decode()
    assert "x-fleetwatch-signature" not in arrival["headers"]
    (row,) = delivery_rows(store)
    assert row["attempts"] == 3 and "HTTP 503" in row["last_error"]
    logs = log.read_text()
    assert f"http://***@127.0.0.1:{hook.port}/***" in logs
    assert "HTTP 503" in logs
    for secret in ("pa55w0rd-xyz", "tok-abcdef"):
        assert secret not in logs and secret not in store_text(store)
    # a config error names the problem in one line, without the secret
    bad = write_config(tmp_path, [{"name": "ops", "type": "webhook", "url": "ftp://fw:pa55w0rd-xyz@h/x"}])
    done = run_cli("notify", "--config", str(bad), "--once", env=env, check=False)
    assert done.returncode == 2 and "pa55w0rd-xyz" not in done.stderr and "ftp://***@h/***" in done.stderr
    missing = write_config(tmp_path, [{"name": "chat", "type": "slack", "url_env": "FW_UNSET_URL"}])
    done = run_cli("notify", "--config", str(missing), "--once", env=env, check=False)
    assert done.returncode == 2 and "$FW_UNSET_URL, which is not set" in done.stderr
    store.close()


def test_second_notifier_waits_for_the_lease(tmp_path, hook):
    hook.start()
    config = write_config(tmp_path, [{"name": "ops", "type": "webhook", "url": hook.url()}])
    env = env_with()
    store = Store(f"sqlite:///{tmp_path / 'fleet.db'}")
    proc = NotifierProcess(config, tmp_path / "n.log", env)
    try:
        wait_for(lambda: "notifier started" in (tmp_path / "n.log").read_text(), 20, "the first notifier")
        done = run_cli("notify", "--config", str(config), "--once", env=env, check=False)
        assert done.returncode == 1 and "another notifier (pid" in done.stderr
    finally:
        assert proc.stop() == 0
    assert run_cli("notify", "--config", str(config), "--once", env=env).returncode == 0
    store.close()


def test_notify_functions_for_the_main_cli(tmp_path):
    """The functions streaming/cli.py wires: configure_parser/command, configure_silence_parser/silence_command."""
    from streaming.notify import cli

    parser = argparse.ArgumentParser(prog="fleetwatch")
    sub = parser.add_subparsers(dest="command", required=True)
    cli.configure_parser(sub.add_parser("notify"))
    cli.configure_silence_parser(sub.add_parser("silence"))
    args = parser.parse_args(["notify", "--config", "f.yaml", "--once", "--group-wait-ms", "0"])
    assert args.command == "notify" and args.once and args.group_wait_ms == 0
    args = parser.parse_args(["silence", "add", "--cluster", "c", "--broker", "3", "--for", "2h", "--reason", "r"])
    assert args.command == "silence" and args.silence_action == "add" and args.broker == 3
    empty = write_config(tmp_path, [])
    with pytest.raises(ConfigError, match=r"alerting\.receivers is empty"):
        cli.command(parser.parse_args(["notify", "--config", str(empty), "--once"]))
