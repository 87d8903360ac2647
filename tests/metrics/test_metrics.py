"""Prometheus `/metrics` against real parts: the gauges read from a real store, the HTTP endpoint,
where it listens and the auth it asks for, and a real Prometheus scraping it and evaluating the
shipped rules."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from support.processes import stop_process

from streaming.config import ConfigError
from streaming.metrics import CONTENT_TYPE, render_metrics, start_metrics_server
from streaming.plumbing.ports import free_port
from streaming.records.alert import Alert
from streaming.store import Store
from streaming.workshop.polling import poll

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
NOW_MS = 1_764_000_100_000


def _fleet_store(url: str) -> Store:
    store = Store(url)
    broker = {"cluster_id": "c1", "broker_id": 1, "state": "ONLINE", "fenced": False, "broker_epoch": 1,
              "last_heartbeat_ms": NOW_MS, "last_answer_ms": NOW_MS, "rack": "a", "endpoints": [],
              "updated_ms": NOW_MS}
    store.write({
        "brokers": [broker, {**broker, "broker_id": 2, "state": "FENCED"}, {**broker, "broker_id": 3},
                    {**broker, "cluster_id": 'odd"id\\x', "state": None}],
        "clusters": [{"cluster_id": "c1", "target": "payments-eu1", "controller_id": 1,
                      "last_response_ms": NOW_MS, "updated_ms": NOW_MS}],
        "targets": [{"target": "payments-eu1", "pinned_cluster_id": "c1", "last_cluster_id": "c1",
                     "last_ok_ms": NOW_MS, "last_error": None, "last_error_ms": None, "updated_ms": NOW_MS}],
        "pipeline_progress": [{"query": "fleetwatch", "batch_id": b, "recorded_at": NOW_MS - 1000 + b,
                               "input_rows": 100 * b, "input_rows_per_s": 50.0, "processed_rows_per_s": 1234.5,
                               "batch_duration_ms": 1500 + b, "watermark_ms": NOW_MS - 7000, "state_rows": 42,
                               "state_memory_bytes": 1 << 20} for b in (1, 2)],
        "quarantine": [{"origin": f"fleetwatch.metadata:0:{i}", "reason": "not_json", "raw": "x",
                        "recorded_at": NOW_MS} for i in range(3)],
    })
    alert = {"schema": "fleetwatch.alert/v1", "alert_id": "a1", "rule": "broker.fenced", "status": "firing",
             "severity": "warning", "cluster_id": "c1", "target": None, "broker_id": 2, "endpoint": None,
             "starts_at": NOW_MS - 60_000, "ends_at": None, "summary": "broker 2 fenced", "details": {}}
    store.record_alerts(map(Alert.from_dict, [
        alert,
        # A target rule without a cluster id: attributed to the target's pinned cluster.
        {**alert, "alert_id": "a2", "rule": "cluster.unreachable", "severity": "critical", "cluster_id": None,
         "target": "payments-eu1", "broker_id": None},
        {**alert, "alert_id": "a3", "rule": "broker.heartbeat_lost", "severity": "critical", "broker_id": 3},
        {**alert, "alert_id": "a3", "rule": "broker.heartbeat_lost", "severity": "critical", "broker_id": 3,
         "status": "resolved", "ends_at": NOW_MS},
    ]))
    return store


def _samples(text: str) -> dict[str, float]:
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line and not line.startswith("#")}


def test_metrics_gauges_from_the_store(tmp_path):
    store = _fleet_store(f"sqlite:///{tmp_path / 'store.db'}")
    text = render_metrics(store.engine, now_ms=NOW_MS)
    samples = _samples(text)
    labels = 'cluster_id="c1",target="payments-eu1"'
    assert samples["fleetwatch_store_up"] == 1
    assert samples[f'fleetwatch_brokers{{{labels},state="ONLINE"}}'] == 2
    assert samples[f'fleetwatch_brokers{{{labels},state="FENCED"}}'] == 1
    assert samples[f'fleetwatch_brokers{{{labels},state="OFFLINE"}}'] == 0
    assert samples['fleetwatch_brokers{cluster_id="odd\\"id\\\\x",target="",state="UNKNOWN"}'] == 1
    assert samples[f'fleetwatch_alerts_firing{{{labels},rule="broker.fenced",severity="warning"}}'] == 1
    assert samples[f'fleetwatch_alerts_firing{{{labels},rule="cluster.unreachable",severity="critical"}}'] == 1
    assert not any("broker.heartbeat_lost" in k for k in samples if k.startswith("fleetwatch_alerts_firing"))
    assert samples['fleetwatch_rule_alerts_firing{rule="broker.heartbeat_lost",severity="critical"}'] == 0
    assert samples[f"fleetwatch_cluster_controller_id{{{labels}}}"] == 1
    pipeline = {k.split("{")[0].removeprefix("fleetwatch_pipeline_"): v for k, v in samples.items()
                if k.startswith("fleetwatch_pipeline_")}
    assert pipeline == {"batch_duration_seconds": 1.502, "input_rows": 200, "processed_rows_per_second": 1234.5,
                        "watermark_timestamp_seconds": (NOW_MS - 7000) / 1000, "lag_seconds": 7.0,
                        "last_batch_timestamp_seconds": (NOW_MS - 998) / 1000, "last_batch_id": 2,
                        "state_rows": 42}
    assert samples['fleetwatch_quarantine_messages{reason="not_json"}'] == 3
    assert samples["fleetwatch_outbox_pending"] == 4
    if shutil.which("promtool"):  # Prometheus' own linter for the exposition format
        lint = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
        assert lint.returncode == 0, lint.stdout + lint.stderr


def test_metrics_say_when_the_store_is_unreadable(tmp_path):
    from sqlalchemy import create_engine

    text = render_metrics(create_engine(f"sqlite:///{tmp_path / 'missing' / 'nothing.db'}"))
    assert _samples(text)["fleetwatch_store_up"] == 0
    assert "fleetwatch_brokers" not in text


def test_metrics_http_endpoint(tmp_path):
    store = _fleet_store(f"sqlite:///{tmp_path / 'store.db'}")
    server = start_metrics_server(store, 0, "127.0.0.1")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10) as resp:
            assert resp.headers["Content-Type"] == CONTENT_TYPE
            assert "fleetwatch_brokers{" in resp.read().decode()
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/nope", timeout=10)
        assert missing.value.code == 404
    finally:
        server.stop()


def test_idle_connections_hold_no_thread_and_are_closed_within_the_timeout(tmp_path):
    """200 connections that send nothing, or half a request, and then wait (issue 42.6: they held
    a thread each, forever, before any auth check): the server's threads stay a handful, a scrape is
    answered beside them, and each is closed once the request timeout has passed."""
    store = _fleet_store(f"sqlite:///{tmp_path / 'store.db'}")
    threads_before = threading.active_count()
    server = start_metrics_server(store, 0, "127.0.0.1", auth=None, request_timeout_s=2.0)
    idle: list[socket.socket] = []
    try:
        for i in range(200):
            conn = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            if i % 2:
                conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the blank line
            idle.append(conn)
        status, body = _status(f"http://127.0.0.1:{server.port}/metrics")
        assert status == 200 and "fleetwatch_brokers{" in body
        assert threading.active_count() - threads_before <= 8, [t.name for t in threading.enumerate()]

        for conn in idle:
            conn.setblocking(False)

        def closed(conn: socket.socket) -> bool:
            try:
                return conn.recv(1) == b""
            except BlockingIOError:
                return False
            except ConnectionResetError:
                return True

        open_ones = list(idle)

        def all_closed() -> bool:
            open_ones[:] = [c for c in open_ones if not closed(c)]
            return not open_ones

        poll(all_closed, 30, lambda: f"the idle connections to be closed: {len(open_ones)} still open",
             interval_s=0.2)
        assert _status(f"http://127.0.0.1:{server.port}/metrics")[0] == 200
    finally:
        for conn in idle:
            conn.close()
        server.stop()
        store.close()
    assert threading.active_count() == threads_before, "stop() ends every thread of the server"


def _own_non_loopback_ipv4() -> str:
    """An IPv4 address of this machine that is not loopback (from `ip -4 addr`): the address a
    neighbour would reach the job on."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True, text=True,
                         check=True).stdout
    addresses = re.findall(r"\binet (\d+\.\d+\.\d+\.\d+)/", out)
    if not addresses:
        pytest.fail(f"this machine has no non-loopback IPv4 address to test the bind on: {out!r}")
    return addresses[0]


def _status(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


_METRICS_ENV = ("FLEETWATCH_METRICS_HOST", "FLEETWATCH_METRICS_PORT", "FLEETWATCH_METRICS_TOKEN",
                "FLEETWATCH_METRICS_TOKEN_FILE", "FLEETWATCH_METRICS_USER", "FLEETWATCH_METRICS_PASSWORD",
                "FLEETWATCH_METRICS_PASSWORD_FILE")


def test_metrics_listen_on_loopback_by_default(tmp_path, monkeypatch):
    import argparse

    from streaming.job import RunOptions
    from streaming.metrics import add_metrics_arguments

    for name in _METRICS_ENV:
        monkeypatch.delenv(name, raising=False)
    parser = argparse.ArgumentParser()
    add_metrics_arguments(parser)
    defaults = parser.parse_args(["--metrics-port", "0"])
    # `fleetwatch run` and the spark-submit driver take the flag's default; run_job's RunOptions its own.
    assert defaults.metrics_host == RunOptions().metrics_host
    neighbour_view = _own_non_loopback_ipv4()
    store = _fleet_store(f"sqlite:///{tmp_path / 'store.db'}")
    for server in (start_metrics_server(store, 0), start_metrics_server(store, 0, defaults.metrics_host)):
        try:
            status, body = _status(f"http://127.0.0.1:{server.port}/metrics")
            assert status == 200 and "fleetwatch_brokers{" in body
            with pytest.raises(urllib.error.URLError) as refused:
                _status(f"http://{neighbour_view}:{server.port}/metrics")
            assert isinstance(refused.value.reason, ConnectionRefusedError), refused.value
        finally:
            server.stop()
    store.close()
    # Where it binds is said, and checked: an address that is not one is a usage error (exit 2).
    with pytest.raises(SystemExit) as bad:
        parser.parse_args(["--metrics-host", "0.0.0.0:9108"])
    assert bad.value.code == 2
    assert parser.parse_args(["--metrics-host", "::1"]).metrics_host == "::1"


@pytest.mark.parametrize("kind", ["token", "token_file", "basic"])
def test_metrics_auth_from_the_environment(tmp_path, monkeypatch, kind):
    for name in _METRICS_ENV:
        monkeypatch.delenv(name, raising=False)
    if kind == "token":
        monkeypatch.setenv("FLEETWATCH_METRICS_TOKEN", "scrape-t0ken")
        good, wrong = {"Authorization": "Bearer scrape-t0ken"}, {"Authorization": "Bearer guess"}
    elif kind == "token_file":
        secret = tmp_path / "token"
        secret.write_text("scrape-t0ken\n")
        monkeypatch.setenv("FLEETWATCH_METRICS_TOKEN_FILE", str(secret))
        good, wrong = {"Authorization": "Bearer scrape-t0ken"}, {"Authorization": "Bearer scrape-t0ke"}
    else:
        import base64

        monkeypatch.setenv("FLEETWATCH_METRICS_USER", "prometheus")
        monkeypatch.setenv("FLEETWATCH_METRICS_PASSWORD", "s3cret")
        good = {"Authorization": "Basic " + base64.b64encode(b"prometheus:s3cret").decode()}
        wrong = {"Authorization": "Basic " + base64.b64encode(b"prometheus:guess").decode()}
    store = _fleet_store(f"sqlite:///{tmp_path / 'store.db'}")
    server = start_metrics_server(store, 0, "127.0.0.1")
    try:
        url = f"http://127.0.0.1:{server.port}/metrics"
        for headers in ({}, wrong):
            status, body = _status(url, headers)
            assert status == 401 and "fleetwatch_" not in body, (headers, status, body[:200])
        status, body = _status(url, good)
        assert status == 200 and "fleetwatch_brokers{" in body, (status, body[:200])
    finally:
        server.stop()
        store.close()


@pytest.mark.parametrize("kind", ["token", "token_file", "basic"])
def test_an_example_secret_is_refused_naming_the_variable(tmp_path, monkeypatch, kind):
    """The placeholders of deploy/k8s/secrets.env.example and deploy/systemd/job.env.example (issue 42.7)."""
    for name in _METRICS_ENV:
        monkeypatch.delenv(name, raising=False)
    secret = tmp_path / "token"
    if kind == "token":
        monkeypatch.setenv(variable := "FLEETWATCH_METRICS_TOKEN", value := "change-me-too")
    elif kind == "token_file":
        secret.write_text((value := "Change-Me") + "\n")
        monkeypatch.setenv("FLEETWATCH_METRICS_TOKEN_FILE", str(secret))
        variable = f"FLEETWATCH_METRICS_TOKEN_FILE ({secret})"
    else:
        monkeypatch.setenv("FLEETWATCH_METRICS_USER", "prometheus")
        monkeypatch.setenv(variable := "FLEETWATCH_METRICS_PASSWORD", value := "CHANGE-ME")
    with pytest.raises(ConfigError) as refused:
        start_metrics_server(f"sqlite:///{tmp_path / 'store.db'}", 0, "127.0.0.1")
    said = str(refused.value)
    assert said == f"{variable} is still the placeholder of the shipped env examples: set a secret of your own"
    assert value.lower() not in said.lower()


@pytest.mark.integration
def test_fleetwatch_run_with_an_example_metrics_token_exits_2_before_anything_starts(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in _METRICS_ENV}
    # The shipped config: its store and checkpoint are under var/ of the working directory.
    done = subprocess.run([sys.executable, "-m", "streaming.cli", "run", "--config",
                           str(ROOT / "conf" / "fleetwatch.yaml"), "--metrics-port", "0"], cwd=tmp_path,
                          env={**env, "FLEETWATCH_METRICS_TOKEN": "change-me-too"}, capture_output=True, text=True,
                          timeout=120)
    assert (done.returncode, done.stderr) == (2, "fleetwatch run: FLEETWATCH_METRICS_TOKEN is still the placeholder "
                                                 "of the shipped env examples: set a secret of your own\n")
    assert list(tmp_path.iterdir()) == [], "nothing was started (no store, no checkpoint, no log)"


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("prometheus") is None, reason="Prometheus not installed: apt-get install prometheus")
def test_real_prometheus_scrapes_the_gauges_and_evaluates_the_rules(tmp_path):
    store = _fleet_store(f"sqlite:///{tmp_path / 'store.db'}")
    server = start_metrics_server(store, 0, "127.0.0.1")
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(DEPLOY / "prometheus" / "fleetwatch-rules.yaml")],
        "scrape_configs": [{"job_name": "fleetwatch",
                            "static_configs": [{"targets": [f"127.0.0.1:{server.port}"]}]}],
    }))
    log = tmp_path / "prometheus.log"
    prometheus = subprocess.Popen(
        ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
    api = f"http://127.0.0.1:{port}/api/v1"

    def query(promql: str) -> list[dict]:
        with urllib.request.urlopen(f"{api}/query?" + urllib.parse.urlencode({"query": promql}), timeout=5) as r:
            return json.loads(r.read())["data"]["result"]

    try:
        started = time.monotonic()
        up = poll(lambda: query('up{job="fleetwatch"} == 1'), 60, "Prometheus to scrape /metrics")
        assert up[0]["metric"]["instance"] == f"127.0.0.1:{server.port}"
        fenced = query('fleetwatch_brokers{state="FENCED"} > 0')
        assert [(r["metric"]["cluster_id"], r["metric"]["target"], r["value"][1]) for r in fenced] == [
            ("c1", "payments-eu1", "1")]
        firing = query("sum by (rule) (fleetwatch_alerts_firing)")
        assert {r["metric"]["rule"]: r["value"][1] for r in firing} == {"broker.fenced": "1",
                                                                        "cluster.unreachable": "1"}
        assert query("fleetwatch_pipeline_batch_duration_seconds")[0]["value"][1] == "1.502"
        assert query("fleetwatch_pipeline_lag_seconds > 0")  # the test data is old: lag is large

        # The shipped rules load and evaluate on the scraped gauges: progress is old, so the
        # stalled-pipeline alert is pending (its `for` has not run out); the store is readable.
        def rule_states():
            with urllib.request.urlopen(f"{api}/alerts", timeout=5) as r:
                return {a["labels"]["alertname"]: a["state"] for a in json.loads(r.read())["data"]["alerts"]}

        states = poll(lambda: "FleetwatchPipelineStalled" in (s := rule_states()) and s, 30,
                      "the rules to evaluate")
        assert states["FleetwatchPipelineStalled"] == "pending"
        assert "FleetwatchStoreUnreadable" not in states and "FleetwatchJobDown" not in states
        with urllib.request.urlopen(f"{api}/rules", timeout=5) as r:
            rules = [rule for g in json.loads(r.read())["data"]["groups"] for rule in g["rules"]]
        shipped = yaml.safe_load((DEPLOY / "prometheus" / "fleetwatch-rules.yaml").read_text())
        names = [rule["alert"] for group in shipped["groups"] for rule in group["rules"]]
        assert sorted(rule["name"] for rule in rules) == sorted(names), rules  # every shipped rule loaded
        assert all(rule["health"] == "ok" for rule in rules), rules
        print(f"\nPrometheus scraped /metrics and evaluated the rules {time.monotonic() - started:.1f} s after start")
    finally:
        stop_process(prometheus)
        server.stop()
        store.close()


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (Debian package prometheus)")
def test_shipped_prometheus_config_and_rules_check():
    for args in (["check", "config", "prometheus.yml"], ["check", "rules", "fleetwatch-rules.yaml"]):
        result = subprocess.run(["promtool", *args], cwd=DEPLOY / "prometheus", capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr
