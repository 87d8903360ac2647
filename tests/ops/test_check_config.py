"""`fleetwatch check-config`: every problem of a config with its path and line, its warnings, `--env` and
`--connect`; and the job's refusal of a config it cannot run (tests/ops/test_deploy.py checks the
configs deploy/ ships with it)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from streaming.ops import check_config
from streaming.plumbing.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


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


@pytest.mark.integration
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


@pytest.mark.integration
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


@pytest.mark.integration
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


@pytest.mark.integration
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


@pytest.mark.integration
def test_check_config_warns_of_a_stall_age_no_earlier_than_the_session_and_of_no_quorum_reading(tmp_path):
    config = tmp_path / "fleetwatch.yaml"
    config.write_text("rules: {session_timeout_ms: 3000}\nprobe: {quorum_interval_ms: 0}\n"
                      "clusters:\n  - {name: a, bootstrap: ['b1:9092'], rules: {stall_after_ms: 3000}}\n")
    result = _check(str(config))
    assert result.returncode == 0
    assert result.stdout.splitlines() == [
        f"{config}:2: warning: probe.quorum_interval_ms: 0: no quorum reading, so rules.stall_after_ms warns of "
        "nothing and a broker's page waits for its session's deadline (streaming/detect/README.md, \"Before Kafka "
        "knows\")",
        f"{config}:4: warning: clusters[0].rules.stall_after_ms: 3000 is not under the session (3000 ms): "
        "broker.stalled would come no earlier than broker.heartbeat_lost",
        f"{config}: OK (2 warnings)"]
    config.write_text("rules: {session_timeout_ms: 3000}\n")  # the default 2500 under a 3 s session: fine
    assert _check(str(config)).stdout.splitlines() == [f"{config}: OK"]


@pytest.mark.integration
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


@pytest.mark.parametrize(("checkpoint_dir", "used"), [
    ("s3a://bucket/fleetwatch", None),  # the job keeps a plain URL intact: nothing to report
    ("hdfs://nn:8020/ck/", None),
    ("s3a://bucket/ck?versionId=3", "s3a://bucket/ck?versionId=3/fleetwatch"),  # the name lands in the query
    ("gs://bucket/ck#v2", "gs://bucket/ck#v2/fleetwatch"),
])
def test_check_config_reports_a_url_checkpoint_the_job_would_mangle(tmp_path, checkpoint_dir, used):
    config = tmp_path / "fleetwatch.yaml"
    config.write_text("bus: {bootstrap_servers: 'k1:9092'}\n"
                      f"spark: {{master: 'spark://m:7077', checkpoint_dir: '{checkpoint_dir}'}}\n")
    problems = [p.render() for p in check_config.check_file(config)]
    assert problems == ([] if used is None else [
        f"{config}:2: error: spark.checkpoint_dir: this version of the job turns the URL into {used!r}: "
        "use a path every node shares (a mounted volume)"])
