"""Deployment and operations: deploy/ files, `check-config`, and `/metrics` scraped by a real Prometheus.

The Spark standalone cluster test is in test_deploy_standalone.py; the store against PostgreSQL in
tests/store/test_store.py.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pyspark
import pytest
import yaml
from support.processes import free_port, poll, stop_process

from streaming.alert import Alert
from streaming.ops import check_config
from streaming.ops.metrics import CONTENT_TYPE, render_metrics, start_metrics_server
from streaming.store import Store

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
KAFKA_PACKAGE = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}"
NOW_MS = 1_764_000_100_000


# -- deploy/ files ------------------------------------------------------------------------------

def _yaml_files() -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yaml", ".yml"))


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _manifests() -> dict[tuple[str, str], dict]:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    out = {}
    for name in kustomization["resources"]:
        for doc in _docs(K8S / name):
            out[(doc["kind"], doc["metadata"]["name"])] = doc
    return out


def test_every_yaml_file_under_deploy_parses():
    files = _yaml_files()
    assert len(files) >= 10, files
    for path in files:
        docs = _docs(path)
        assert docs, f"{path} is empty"
        assert all(isinstance(d, dict) for d in docs), path


def test_kubernetes_manifests_hold_together():
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    for name in kustomization["resources"] + kustomization["configurations"]:
        assert (K8S / name).is_file(), name
    manifests = _manifests()
    config_files = kustomization["configMapGenerator"][0]["files"]
    assert config_files == ["fleetwatch.yaml=conf/fleetwatch.yaml"]
    assert (K8S / ".gitignore").read_text().split() == ["secrets.env"]

    app = manifests[("SparkApplication", "fleetwatch")]
    assert app["apiVersion"] == "sparkoperator.k8s.io/v1beta2"
    spec = app["spec"]
    assert (spec["type"], spec["mode"], spec["sparkVersion"]) == ("Python", "cluster", pyspark.__version__)
    assert spec["deps"]["packages"] == [KAFKA_PACKAGE]
    assert spec["mainApplicationFile"] == "local:///opt/fleetwatch/spark/fleetwatch_job.py"
    assert spec["arguments"][:2] == ["--config", "/etc/fleetwatch/fleetwatch.yaml"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["checkpoint"]["persistentVolumeClaim"]["claimName"] == "fleetwatch-checkpoint"
    pvc = manifests[("PersistentVolumeClaim", "fleetwatch-checkpoint")]
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]  # driver and executors write it
    config = yaml.safe_load((K8S / "conf" / "fleetwatch.yaml").read_text())
    for role in ("driver", "executor"):
        mounts = {m["name"]: m["mountPath"] for m in spec[role]["volumeMounts"]}
        assert mounts["checkpoint"] == config["spark"]["checkpoint_dir"], role
        assert spec[role]["envFrom"] == [{"secretRef": {"name": "fleetwatch-secrets"}}]
    assert spec["driver"]["serviceAccount"] == "fleetwatch-spark"
    assert ("ServiceAccount", "fleetwatch-spark") in manifests
    assert spec["driver"]["ports"][0]["containerPort"] == int(spec["arguments"][spec["arguments"].index(
        "--metrics-port") + 1])

    commands = {}
    for component in ("probe", "notifier", "dashboard"):
        deployment = manifests[("Deployment", f"fleetwatch-{component}")]
        pod = deployment["spec"]["template"]
        assert deployment["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
        (container,) = pod["spec"]["containers"]
        assert container["image"] == "fleetwatch"  # set by kustomization's images:
        commands[component] = container["args"]
        # The config each process reads is the mounted ConfigMap.
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        args = container["args"]
        config_path = args[args.index("--config") + 1] if "--config" in args else env["FLEETWATCH_CONFIG"]
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert config_path == f"{mounts['config']}/fleetwatch.yaml", component
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert volumes["config"]["configMap"]["name"] == "fleetwatch-config"
        assert {"secretRef": {"name": "fleetwatch-secrets"}} in container["envFrom"]
    assert commands["probe"][:2] == ["fleetwatch", "probe"]
    assert commands["notifier"][:2] == ["fleetwatch", "notify"]
    assert commands["dashboard"][0] == "gunicorn" and commands["dashboard"][-1] == "dashboard.wsgi:server"

    keys = {line.split("=", 1)[0] for line in (K8S / "secrets.env.example").read_text().splitlines()
            if line and not line.startswith("#")}
    assert {name for _, name in check_config._env_names(check_config._sections(config))} <= keys
    assert "PGPASSWORD" in keys


def test_the_shipped_configs_pass_check_config(monkeypatch):
    for line in (K8S / "secrets.env.example").read_text().splitlines():
        if line and not line.startswith("#"):
            monkeypatch.setenv(*line.split("=", 1))
    for path in (ROOT / "conf" / "fleetwatch.yaml", K8S / "conf" / "fleetwatch.yaml"):
        assert check_config.check_file(path, check_env=True) == [], path


def test_dockerfile_copies_what_exists_and_runs_the_entrypoint():
    text = (DEPLOY / "Dockerfile").read_text()
    for line in re.findall(r"^COPY (?!--from)(.+)$", text, re.M):
        *sources, _dest = line.split()
        for source in sources:
            assert (ROOT / source).exists(), source
    assert 'ENTRYPOINT ["/usr/bin/tini", "--", "/opt/fleetwatch/entrypoint.sh"]' in text
    requires = re.search(r'requires-python = ">=(\d+\.\d+)', (ROOT / "pyproject.toml").read_text()).group(1)
    assert f"ARG PYTHON_VERSION={requires}" in text and f"python{requires}/site-packages/pyspark" in text


def test_shell_scripts_parse_and_submit_refuses_missing_arguments(tmp_path):
    scripts = sorted(DEPLOY.rglob("*.sh"))
    assert {p.name for p in scripts} >= {"submit.sh", "graceful.sh", "entrypoint.sh"}
    for script in scripts:
        subprocess.run(["bash", "-n", str(script)], check=True)
    submit = DEPLOY / "spark" / "submit.sh"
    assert subprocess.run(["bash", str(submit), "--help"], capture_output=True).returncode == 0
    missing = subprocess.run(["bash", str(submit), "--master", "local[1]"], capture_output=True, text=True)
    assert missing.returncode == 2 and "--config" in missing.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("spark: {trigger_ms: -1}\n")
    refused = subprocess.run(["bash", str(submit), "--master", "local[1]", "--config", str(bad)],
                             capture_output=True, text=True, env={"PATH": "/usr/bin:/bin",
                                                                  "FLEETWATCH_PYTHON": sys.executable})
    assert refused.returncode == 2
    assert f"{bad}:1: error: spark.trigger_ms" in refused.stderr


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_systemd_units_verify():
    units = sorted((DEPLOY / "systemd").glob("fleetwatch*.*"))
    assert {u.name for u in units} >= {"fleetwatch-job.service", "fleetwatch-probe.service",
                                       "fleetwatch-notify.service", "fleetwatch-dashboard.service",
                                       "fleetwatch.target"}
    result = subprocess.run(["systemd-analyze", "verify", *map(str, units)], capture_output=True, text=True)
    # The executables live under /opt/fleetwatch on a real host, not here.
    complaints = [line for line in (result.stdout + result.stderr).splitlines()
                  if line.strip() and "is not executable: No such file or directory" not in line]
    assert complaints == []
    job = (DEPLOY / "systemd" / "fleetwatch-job.service").read_text()
    assert "KillMode=mixed" in job  # SIGTERM to the Python driver only, not to its JVM


def test_job_refuses_a_config_without_a_bus(tmp_path):
    config = tmp_path / "fleetwatch.yaml"
    config.write_text("store: {url: 'sqlite:///x.db'}\n")
    result = subprocess.run([sys.executable, str(DEPLOY / "spark" / "fleetwatch_job.py"), "--config", str(config)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "bus.bootstrap_servers must name the telemetry bus" in result.stderr


# -- check-config ----------------------------------------------------------------------------------

def _check(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "streaming.ops.check_config", *argv], capture_output=True,
                          text=True, cwd=ROOT)


def test_check_config_prints_every_problem_with_its_path_and_line(tmp_path):
    config = tmp_path / "fleetwatch.yaml"
    config.write_text(
        "bus: {bootstrap_servers: 'k1:9092,nohost'}\n"      # 1
        "store: {url: 'mysql://db/fw'}\n"                  # 2
        "rules:\n"                                         # 3
        "  session_timeout_ms: 0\n"                        # 4
        "  bogus: 1\n"                                     # 5
        "clusters:\n"                                      # 6
        "  - name: a\n"                                    # 7
        "    bootstrap: ['b1']\n"                          # 8
        "alerting:\n"                                      # 9
        "  receivers: [{name: ops, type: webhook}]\n"      # 10
        "  routes: [{receiver: nobody}]\n")                # 11
    result = _check(str(config))
    assert result.returncode == 2
    lines = result.stdout.splitlines()
    assert lines[:-1] == [
        f"{config}:4: error: rules.session_timeout_ms: Input should be greater than 0",
        f"{config}:5: error: rules.bogus: unknown key",
        f"{config}:11: error: alerting.routes[0].receiver: 'nobody' is not a configured receiver",
        f"{config}:2: error: store.url: unsupported database 'mysql': use sqlite or postgresql",
        f"{config}:1: error: bus.bootstrap_servers: 'nohost' is not host:port",
        f"{config}:8: error: clusters[0].bootstrap[0]: 'b1' is not host:port",
        f"{config}:10: error: alerting.receivers[0]: a webhook receiver needs url or url_env",
    ]
    assert lines[-1] == f"{config}: 7 problems"


def test_check_config_ok_warnings_env_and_unreadable_files(tmp_path, monkeypatch):
    good = tmp_path / "good.yaml"
    good.write_text("bus: {bootstrap_servers: 'k1:9092'}\n"
                    "store: {url: 'postgresql+psycopg://fw:pw@db/fw'}\n"
                    "alerting: {receivers: [{name: ops, type: webhook, url: 'https://h', "
                    "secret_env: FW_TEST_SECRET_UNSET}]}\n")
    ok = _check(str(good))
    assert ok.returncode == 0
    assert ok.stdout.splitlines() == [
        f"{good}:2: warning: store.url: holds a password: leave it out and set PGPASSWORD (e.g. from a Secret)",
        f"{good}: OK (1 warning)"]
    assert _check(str(good), "--strict").returncode == 2
    monkeypatch.delenv("FW_TEST_SECRET_UNSET", raising=False)
    env = _check(str(good), "--env")
    assert env.returncode == 2
    assert (f"{good}:3: error: alerting.receivers[0].secret_env: environment variable FW_TEST_SECRET_UNSET "
            "is not set") in env.stdout

    broken = tmp_path / "broken.yaml"
    broken.write_text("bus:\n  bootstrap_servers: [unclosed\n")
    result = _check(str(broken), str(tmp_path / "missing.yaml"))
    assert result.returncode == 2
    assert re.search(rf"^{re.escape(str(broken))}:\d+: error: not valid YAML", result.stdout, re.M)
    assert f"{tmp_path / 'missing.yaml'}: error: cannot read: No such file or directory" in result.stdout
    assert _check().returncode == 2


def test_check_config_warns_that_plain_gives_a_misrouted_broker_the_password(tmp_path):
    config = tmp_path / "fleetwatch.yaml"
    config.write_text("clusters:\n"
                      "  - name: pay\n"
                      "    bootstrap: ['b1.pay:9093']\n"
                      "    security: {protocol: SASL_SSL, sasl_mechanism: PLAIN, username_env: U, password_env: P}\n"
                      "  - name: orders\n"
                      "    bootstrap: ['b1.ord:9093']\n"
                      "    security: {protocol: SASL_SSL, sasl_mechanism: SCRAM-SHA-512, username_env: U, "
                      "password_env: P}\n")
    result = _check(str(config))
    assert result.returncode == 0
    assert result.stdout.splitlines() == [
        f"{config}:4: warning: clusters[0].security.sasl_mechanism: PLAIN hands the password to whichever broker "
        "answers at an address, a misrouted one of another cluster too (Kafka checks the identity only after "
        "authentication): use SCRAM-SHA-512",
        f"{config}: OK (1 warning)"]


def test_check_config_warns_of_a_source_lead_that_eats_the_allowed_lateness(tmp_path):
    config = tmp_path / "fleetwatch.yaml"
    config.write_text("rules:\n  allowed_lateness_ms: 5000\n  max_source_lead_ms: 5000\n")
    result = _check(str(config))
    assert result.returncode == 0
    assert result.stdout.splitlines() == [
        f"{config}:3: warning: rules.max_source_lead_ms: 5000 is not under rules.allowed_lateness_ms (5000): a "
        "collector whose clock runs that far ahead moves the watermark past the other collectors' events, which "
        "then arrive late (streaming/detect/README.md, \"Input bounds\")",
        f"{config}: OK (1 warning)"]
    config.write_text("rules: {max_source_lead_ms: 4999}\n")
    assert _check(str(config)).stdout.splitlines() == [f"{config}: OK"]


def test_check_config_connect_reports_an_unreachable_store_and_bus(tmp_path):
    dead = free_port()
    config = tmp_path / "fleetwatch.yaml"
    config.write_text(f"bus: {{bootstrap_servers: '127.0.0.1:{dead}'}}\n"
                      f"store: {{url: 'postgresql+psycopg://fw:secretpw@127.0.0.1:{dead}/fw'}}\n")
    result = _check(str(config), "--connect")
    assert result.returncode == 2
    assert f"{config}:2: error: store.url: cannot connect: OperationalError" in result.stdout
    assert f"{config}:1: error: bus.bootstrap_servers: cannot connect to 127.0.0.1:{dead}" in result.stdout
    assert "secretpw" not in result.stdout


# -- /metrics -------------------------------------------------------------------------------------------

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
        assert len(rules) == 8 and all(rule["health"] == "ok" for rule in rules), rules
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


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
def test_kustomize_renders_the_manifests(tmp_path):
    copy = tmp_path / "k8s"
    shutil.copytree(K8S, copy)
    shutil.copy(K8S / "secrets.env.example", copy / "secrets.env")
    result = subprocess.run(["kubectl", "kustomize", str(copy)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert {("Secret", "fleetwatch-secrets"), ("ConfigMap", "fleetwatch-config"),
            ("SparkApplication", "fleetwatch")} <= kinds
    assert all(d["metadata"].get("namespace") == "fleetwatch" for d in docs if d["kind"] != "Namespace")
    images = [d["spec"]["image"] for d in docs if d["kind"] == "SparkApplication"]
    images += [c["image"] for d in docs if d["kind"] == "Deployment"
               for c in d["spec"]["template"]["spec"]["containers"]]
    assert images == ["registry.example/fleetwatch:0.1.0"] * 4
    config = next(d for d in docs if d["kind"] == "ConfigMap")["data"]["fleetwatch.yaml"]
    assert config == (K8S / "conf" / "fleetwatch.yaml").read_text()


def test_check_config_reports_a_url_checkpoint_the_job_would_mangle(tmp_path):
    from types import SimpleNamespace

    from streaming.config import SparkConfig
    from streaming.pipeline.session import checkpoint_path

    config = tmp_path / "fleetwatch.yaml"
    config.write_text("bus: {bootstrap_servers: 'k1:9092'}\n"
                      "spark: {master: 'spark://m:7077', checkpoint_dir: 's3a://bucket/fleetwatch'}\n")
    used = checkpoint_path(SimpleNamespace(spark=SparkConfig(checkpoint_dir="s3a://bucket/fleetwatch")), "fleetwatch")
    problems = [p.render() for p in check_config.check_file(config)]
    if used.startswith("s3a://bucket/fleetwatch/"):  # the job keeps URLs intact: nothing to report
        assert problems == []
    else:
        assert problems == [f"{config}:2: error: spark.checkpoint_dir: this version of the job turns the URL "
                            f"into {used!r}: use a path every node shares "
                            "(a mounted volume)"]
