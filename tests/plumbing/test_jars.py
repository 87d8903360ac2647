"""The jars fleetwatch fetches from Maven Central are the ones pinned (streaming/plumbing/jar_pins.py): a jar
with one byte changed, one the pins do not name or one missing is refused in one line, on a cached
copy and after a real Maven fetch; Maven itself runs with strict checksums.

The jars are the real ones of the project's cache (`make jars`), copied into a cache of the test's
own; the Maven tests serve them from a repository on disk that is the real cache's but for the one
poisoned artifact, so no network is needed and the shared cache is never written.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pyspark
import pytest

from streaming.plumbing import jars
from streaming.plumbing.jar_pins import JAR_SHA256
from streaming.plumbing.jars import JMX_EXPORTER, SPARK_KAFKA, JarsUnavailable, agent_jar, connector_jars, fetch

REAL_CACHE = jars.cache_dir()  # before a test points FLEETWATCH_JAR_CACHE at its own
JMX_ARTIFACT = Path("io/prometheus/jmx/jmx_prometheus_javaagent/1.0.1")
JMX_JAR = "jmx_prometheus_javaagent-1.0.1.jar"


def _fetched(bundle: str) -> Path:
    lib = REAL_CACHE / bundle / "lib"
    if not (lib / ".complete").exists():
        pytest.skip(f"{bundle} is not fetched into {REAL_CACHE} (make jars)")
    return lib


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    own = tmp_path / "jars"
    monkeypatch.setenv("FLEETWATCH_JAR_CACHE", str(own))
    return own


def _with_one_byte_changed(data: bytes) -> bytes:
    middle = len(data) // 2
    return data[:middle] + bytes([data[middle] ^ 0x01]) + data[middle + 1:]


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.strip()


def test_a_cached_jar_with_one_byte_changed_is_refused_in_one_line(cache, capsys):
    lib = cache / JMX_EXPORTER / "lib"
    shutil.copytree(_fetched(JMX_EXPORTER), lib)
    assert fetch(JMX_EXPORTER) == lib  # the real jar is the pinned one
    jar = lib / JMX_JAR
    jar.write_bytes(_with_one_byte_changed(jar.read_bytes()))

    with pytest.raises(JarsUnavailable) as refused:
        fetch(JMX_EXPORTER)
    message = str(refused.value)
    assert "\n" not in message
    assert f"{jar} has SHA-256 {hashlib.sha256(jar.read_bytes()).hexdigest()}, pinned " \
           f"{JAR_SHA256[JMX_EXPORTER][JMX_JAR]}; refused" in message
    with pytest.raises(JarsUnavailable):
        agent_jar()  # what the Kafka controllers load with -javaagent
    assert jars.main(["fetch", JMX_EXPORTER]) == 1
    assert _one_line(capsys).startswith(f"fleetwatch: {JMX_EXPORTER}: {jar} has SHA-256 ")


def test_a_jar_the_pins_do_not_name_or_a_pinned_jar_missing_is_refused(cache):
    lib = cache / JMX_EXPORTER / "lib"
    shutil.copytree(_fetched(JMX_EXPORTER), lib)
    shutil.copy(lib / JMX_JAR, lib / "extra-1.0.jar")
    with pytest.raises(JarsUnavailable, match=r"not pinned: \['extra-1.0.jar'\], missing: none"):
        fetch(JMX_EXPORTER)
    (lib / "extra-1.0.jar").unlink()
    (lib / JMX_JAR).unlink()
    with pytest.raises(JarsUnavailable, match=rf"not pinned: none, missing: \['{JMX_JAR}'\]"):
        fetch(JMX_EXPORTER)


def test_the_connector_jars_spark_is_given_are_verified(cache, capsys):
    lib = cache / SPARK_KAFKA / "lib"
    lib.mkdir(parents=True)
    for jar in _fetched(SPARK_KAFKA).iterdir():
        (lib / jar.name).symlink_to(jar)
    spark = pyspark.__version__
    expected = ["commons-pool2-2.13.1.jar", "kafka-clients-3.9.2.jar", f"spark-sql-kafka-0-10_2.13-{spark}.jar",
                f"spark-token-provider-kafka-0-10_2.13-{spark}.jar"]
    assert [jar.name for jar in connector_jars()] == expected
    assert jars.main(["connector"]) == 0
    assert capsys.readouterr().out.strip() == ",".join(str(lib / name) for name in expected)

    clients = lib / "kafka-clients-3.9.2.jar"
    data = clients.read_bytes()
    clients.unlink()
    clients.write_bytes(_with_one_byte_changed(data))
    with pytest.raises(JarsUnavailable, match=r"kafka-clients-3\.9\.2\.jar has SHA-256 [0-9a-f]{64}, pinned"):
        connector_jars()  # what spark_session puts into spark.jars
    assert jars.main(["connector"]) == 1  # what deploy/spark/submit.sh and the image's build run
    assert "kafka-clients-3.9.2.jar has SHA-256" in _one_line(capsys)


def _poisoned_repository(real: Path, at: Path, jar: bytes, sha1: str) -> Path:
    """A Maven repository on disk that is `real` (symlinks; Maven only reads a remote) but for the
    JMX agent's jar, which is `jar`, and its checksum file, which says `sha1`."""
    source, here = real, at
    for part in JMX_ARTIFACT.parts:
        here.mkdir()
        for entry in source.iterdir():
            if entry.name != part:
                (here / entry.name).symlink_to(entry)
        source, here = source / part, here / part
    here.mkdir()
    for entry in source.iterdir():
        if not entry.name.startswith(JMX_JAR):
            (here / entry.name).symlink_to(entry)
    (here / JMX_JAR).write_bytes(jar)
    (here / f"{JMX_JAR}.sha1").write_text(sha1)
    return at


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("mvn") is None or shutil.which("java") is None, reason="Maven and Java not installed")
def test_a_poisoned_jar_from_the_repository_is_refused_by_maven_then_by_the_pin(cache, tmp_path, monkeypatch):
    genuine = (_fetched(JMX_EXPORTER) / JMX_JAR).read_bytes()
    if not (REAL_CACHE / "repository" / JMX_ARTIFACT / JMX_JAR).is_file():
        pytest.skip("the Maven repository of the cache has no JMX agent")
    altered = _with_one_byte_changed(genuine)
    remote = _poisoned_repository(REAL_CACHE / "repository", tmp_path / "remote", altered,
                                  hashlib.sha1(genuine).hexdigest())
    # Maven's user settings (where a mirror would be set up): the repository above is `central`.
    home = tmp_path / "home"
    (home / ".m2").mkdir(parents=True)
    (home / ".m2" / "settings.xml").write_text(
        "<settings><profiles><profile><id>poisoned</id>"
        f"<repositories><repository><id>central</id><url>{remote.as_uri()}</url></repository></repositories>"
        f"<pluginRepositories><pluginRepository><id>central</id><url>{remote.as_uri()}</url></pluginRepository>"
        "</pluginRepositories></profile></profiles>"
        "<activeProfiles><activeProfile>poisoned</activeProfile></activeProfiles></settings>")
    monkeypatch.setenv("MAVEN_OPTS", f"-Duser.home={home}")
    lib = cache / JMX_EXPORTER / "lib"

    # The jar's .sha1 is the genuine jar's (a corrupt or altered download): Maven's strict
    # checksums fail the fetch, where Maven would only warn.
    with pytest.raises(JarsUnavailable) as refused:
        fetch(JMX_EXPORTER)
    message = str(refused.value)
    assert message.startswith(f"Maven could not fetch {JMX_EXPORTER}: ") and "hecksum" in message, message
    assert "\n" not in message and not (lib / ".complete").exists()

    # Whoever altered it fixed its .sha1 too: Maven takes it, the pinned SHA-256 refuses it.
    (remote / JMX_ARTIFACT / f"{JMX_JAR}.sha1").write_text(hashlib.sha1(altered).hexdigest())
    with pytest.raises(JarsUnavailable) as refused:
        fetch(JMX_EXPORTER)
    message = str(refused.value)
    assert message.startswith(f"{JMX_EXPORTER}: {lib / JMX_JAR} has SHA-256 {hashlib.sha256(altered).hexdigest()}, "
                              "pinned "), message
    assert "\n" not in message and not (lib / ".complete").exists()
