"""The demo's parts that need no Spark: other processes' output as log records, the status line,
and the demo's webhook receiver fed by the real notifier over real HTTP.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from streaming.config import FleetwatchConfig
from streaming.demo import RECEIVER, demo_alerting
from streaming.demo.webhook import DemoReceiver
from streaming.job.console import Status, rate_per_s, render_status
from streaming.notify import INCIDENT_SCHEMA
from streaming.notify.delivery import Notifier, NotifyOptions
from streaming.notify.receivers import sign
from streaming.plumbing.logs import LogPipe, group_lines, parse_line
from streaming.plumbing.receiver import Reply, Request, WebhookReceiver
from streaming.records.alert import Alert
from streaming.store import Store, deliveries
from streaming.workshop.hooks import make_alert, resolved
from streaming.workshop.polling import poll

# -- other processes' lines -------------------------------------------------------------------

JAVA_TRACE = [
    "26/11/25 03:53:15 ERROR Executor: Exception in task 0.0 in stage 3.0 (TID 7)",
    "org.apache.spark.SparkException: Python worker exited unexpectedly (crashed)",
    "\tat org.apache.spark.api.python.BasePythonRunner.read(PythonRunner.scala:612)",
    "Caused by: java.io.EOFException",
    "\t... 12 more",
]
PY_TRACE = ["Traceback (most recent call last):", '  File "/x/worker.py", line 3, in <module>',
            "    main()", "ValueError: bad bucket"]


@pytest.mark.parametrize(("line", "level", "logger", "msg"), [
    ("26/11/25 03:52:29 WARN Utils: Your hostname, vm, resolves to a loopback address",
     logging.WARNING, "spark.Utils", "Your hostname, vm, resolves to a loopback address"),
    ("26/11/25 03:53:51 WARN ProcessingTimeExecutor: Current batch is falling behind.",
     logging.WARNING, "spark.ProcessingTimeExecutor", "Current batch is falling behind."),
    ("[2026-11-25 03:52:28 +0000] [3125] [INFO] Starting gunicorn 23.0.0",
     logging.INFO, "spark", "Starting gunicorn 23.0.0"),
    ("WARNING: Using incubator modules: jdk.incubator.vector",
     logging.WARNING, "spark", "Using incubator modules: jdk.incubator.vector"),
    ("/x/frame.py:12: FutureWarning: the default will change",
     logging.WARNING, "spark", "/x/frame.py:12: FutureWarning: the default will change"),
    ("Streaming TransformWithStateInPandas Python worker Starting execution of UDF",
     logging.INFO, "spark", "Streaming TransformWithStateInPandas Python worker Starting execution of UDF"),
    ("\n".join(PY_TRACE), logging.ERROR, "spark", "\n".join(PY_TRACE)),
])
def test_a_line_of_another_process_keeps_its_level_and_logger(line: str, level: int, logger: str, msg: str) -> None:
    parsed = parse_line(line, "spark")
    assert (parsed.level, parsed.logger, parsed.msg) == (level, logger, msg)


def test_a_stack_trace_is_one_entry_with_the_line_that_started_it() -> None:
    lines = ["Starting Streaming TransformWithStateInPandas Python worker.", "", *JAVA_TRACE, *PY_TRACE,
             "after the trace"]
    assert group_lines(lines) == [
        "Starting Streaming TransformWithStateInPandas Python worker.",
        JAVA_TRACE[0],
        "\n".join(JAVA_TRACE[1:]),
        "\n".join(PY_TRACE),
        "after the trace",
    ]


def test_a_child_process_output_becomes_one_log_record_per_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    pipe = LogPipe("child")
    script = ("import sys; print('26/11/25 03:52:32 WARN NativeCodeLoader: Unable to load native-hadoop');"
              "sys.stdout.flush(); sys.stderr.write('plain words\\n')")
    subprocess.run([sys.executable, "-c", script], stdout=pipe.fd, stderr=pipe.fd, check=True)
    pipe.close_write_end()

    def logged() -> list[tuple[str, int, str]]:
        return [(r.name, r.levelno, r.getMessage()) for r in caplog.records if r.name.startswith("child")]

    poll(lambda: len(logged()) >= 2, 10, "both lines logged")
    assert logged() == [("child.NativeCodeLoader", logging.WARNING, "Unable to load native-hadoop"),
                        ("child", logging.INFO, "plain words")]


# -- the status line ------------------------------------------------------------------------

def test_the_status_line_says_the_numbers_in_words_and_never_wraps() -> None:
    status = Status(133.0, batches=1, events_per_s=1234.4, lag_s=2.06, firing=1, alerts_seen=3, delivered=5,
                    failing=2, note="real Kafka: broker 3 frozen (SIGSTOP)")
    assert render_status(status, 200) == ("0:02:13 | 1 batch | 1,234 events/s | lag 2.1 s | 1 alert firing | "
                                          "5 delivered, 2 failing | real Kafka: broker 3 frozen (SIGSTOP)")
    assert len(render_status(status, 40)) == 39
    assert render_status(Status(5.0, phase="starting Spark"), 80) == "0:00:05 | starting Spark"
    no_notifier = render_status(Status(61.0, batches=12, firing=0), 200)
    assert no_notifier == "0:01:01 | 12 batches | -- events/s | lag -- | 0 alerts firing"


def test_events_per_second_over_the_sampled_window() -> None:
    assert rate_per_s([(10.0, 1000)]) is None
    assert rate_per_s([(10.0, 1000), (12.0, 1000), (20.0, 6000)]) == 500.0


# -- the demo's webhook receiver -----------------------------------------------------------------

def test_the_demo_receiver_records_what_the_notifier_signs_and_refuses_the_rest(tmp_path: Path) -> None:
    secret = "demo-secret-4e1b"
    store = Store(f"sqlite:///{tmp_path / 'fleetwatch.db'}")
    alert = make_alert("broker.fenced", broker=2, starts_at=int(time.time() * 1000) - 5000)
    store.record_alerts(map(Alert.from_dict, [alert]))
    records = tmp_path / "received.jsonl"
    with DemoReceiver(records, secret) as receiver:
        notifier = Notifier(FleetwatchConfig(alerting=demo_alerting(receiver.url)), store, NotifyOptions(),
                            env={"FLEETWATCH_DEMO_WEBHOOK_SECRET": secret})
        try:
            counts = notifier.run(once=True)
        finally:
            notifier.close()
        body = json.dumps({"alert_id": "forged", "status": "firing"}).encode()
        forged = httpx.post(receiver.url, content=body, headers={
            "X-Fleetwatch-Signature": sign("not-the-secret", body, int(time.time()))})
        unsigned = httpx.post(receiver.url, content=body)
    assert counts["delivered"] == 1
    assert (forged.status_code, unsigned.status_code) == (401, 401)
    got = [json.loads(line) for line in records.read_text().splitlines()]
    assert [(g["alert"]["alert_id"], g["alert"]["status"], g["signature"]) for g in got] == [
        (alert["alert_id"], "firing", "verified")]
    with store.engine.connect() as conn:
        assert [tuple(r) for r in conn.execute(deliveries.select().with_only_columns(
            deliveries.c.receiver, deliveries.c.state))] == [(RECEIVER, "delivered")]
    store.close()


def test_a_firing_replayed_as_its_resolution_is_refused_and_the_real_resolution_kept(tmp_path: Path) -> None:
    """Issue 42.8: the signature covered the body only, so a firing replayed within 300 s with
    `<alert_id>:resolved` in X-Fleetwatch-Delivery-Id passed, and a receiver deduplicating on that
    header then dropped the real resolution as a duplicate. Its v2 now covers the delivery id: the
    demo's receiver refuses the replay and keeps the resolution the real notifier delivers."""
    secret = "demo-secret-9c2d"
    store = Store(f"sqlite:///{tmp_path / 'fleetwatch.db'}")
    now = int(time.time() * 1000)
    alert = make_alert("broker.heartbeat_lost", broker=3, starts_at=now - 60_000)
    store.record_alerts(map(Alert.from_dict, [alert]))
    records = tmp_path / "received.jsonl"
    on_the_wire: list[Request] = []

    with DemoReceiver(records, secret) as receiver:
        def relay(request: Request) -> Reply:
            """Between the notifier and the receiver: passes each request on, and keeps a copy (an eavesdropper)."""
            on_the_wire.append(request)
            passed = httpx.post(receiver.url, content=request.body, headers=_fleetwatch_headers(request.headers))
            return Reply(passed.status_code, passed.content)

        with WebhookReceiver(relay) as wire:
            notifier = Notifier(FleetwatchConfig(alerting=demo_alerting(wire.url("/alerts"))), store, NotifyOptions(),
                                env={"FLEETWATCH_DEMO_WEBHOOK_SECRET": secret})
            try:
                assert notifier.run(once=True)["delivered"] == 1  # the firing
                [firing] = on_the_wire
                assert firing.headers["x-fleetwatch-delivery-id"] == f"{alert['alert_id']}:firing"
                forged = {**_fleetwatch_headers(firing.headers), "x-fleetwatch-status": "resolved",
                          "x-fleetwatch-delivery-id": f"{alert['alert_id']}:resolved"}
                replay = httpx.post(receiver.url, content=firing.body, headers=forged)
                store.record_alerts(map(Alert.from_dict, [resolved(alert, now)]))
                assert notifier.run(once=True)["delivered"] == 2  # and the real resolution (counts add up)
            finally:
                notifier.close()
    assert replay.status_code == 401, replay.text
    got = [json.loads(line) for line in records.read_text().splitlines()]
    assert [(g["alert"]["alert_id"], g["alert"]["status"], g["duplicate"]) for g in got] == [
        (alert["alert_id"], "firing", False), (alert["alert_id"], "resolved", False)]
    store.close()


def _fleetwatch_headers(headers: dict[str, str] | object) -> dict[str, str]:
    """A request's X-Fleetwatch-* headers and its Content-Type, as a relay passes them on."""
    return {name: value for name, value in dict(headers).items()  # type: ignore[call-overload]
            if name.startswith("x-fleetwatch-") or name == "content-type"}


def test_the_demo_receiver_records_a_fleet_incidents_members(tmp_path: Path) -> None:
    """A fleet incident is one webhook body of `fleetwatch.incident/v1` (streaming/notify/receivers.py):
    the demo's receiver answered it 400 (no `alert_id` at its top), so the notifier retried it until
    it was dead-lettered. It now records each member alert it tells, beside the incident's id."""
    secret = "demo-secret-41aa"
    records = tmp_path / "received.jsonl"
    members = [make_alert("broker.heartbeat_lost", broker=b, starts_at=int(time.time() * 1000) - 5000)
               for b in (1, 2)]
    body = json.dumps({"schema": INCIDENT_SCHEMA, "incident_id": "inc-1", "status": "firing",
                       "delivery_id": "inc-1:firing:abc", "alerts": members}).encode()
    with DemoReceiver(records, secret) as receiver:
        answer = httpx.post(receiver.url, content=body, headers={
            "X-Fleetwatch-Delivery-Id": "inc-1:firing:abc",
            "X-Fleetwatch-Signature": sign(secret, body, int(time.time()), "inc-1:firing:abc")})
    assert answer.status_code == 200
    got = [json.loads(line) for line in records.read_text().splitlines()]
    assert [(g["incident_id"], g["alert"]["alert_id"], g["duplicate"]) for g in got] == [
        ("inc-1", members[0]["alert_id"], False), ("inc-1", members[1]["alert_id"], False)]
