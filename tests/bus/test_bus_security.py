"""A bus that needs TLS and SASL SCRAM (issue 19): every client of ours reaches it through
`bus.security`, with the credentials from the environment.

A real Kafka 4.4 broker listens with SASL_SSL (SCRAM-SHA-512, a certificate of its own CA). The
simulator produces a fleet to it, the live job reads it with each source (Spark's connector and
the Python reader) and publishes its alerts back to it, and the store gets exactly the alerts the
engine gives for the same events. A wrong password is refused with a one-line error.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kafka import KafkaConsumer
from sqlalchemy import select

from streaming.bus import BusAccess, BusError, ensure_topics
from streaming.collect.simulate import FleetSpec, Simulation, produce_live
from streaming.config import ConfigError, SecurityConfig
from streaming.detect import detect
from streaming.job import start_live_query
from streaming.plumbing.ports import free_port
from streaming.records import topics
from streaming.records.contract import event_from_dict
from streaming.sinks.alerts_topic import AlertPublisher
from streaming.store import Store, alert_history
from streaming.workshop.kraft import KRaftCluster, SecureListener
from streaming.workshop.polling import poll

pytestmark = [pytest.mark.real_kafka, pytest.mark.spark]

USER, PASSWORD = "fleetwatch-job", "a-scram-secret"


@pytest.fixture(scope="module")
def secure_bus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, SecurityConfig]]:
    workdir = tmp_path_factory.mktemp("secure-bus")
    listener = SecureListener.create(workdir / "tls", USER, PASSWORD)
    with KRaftCluster(workdir / "kafka", brokers=1, secure=listener) as cluster:
        security = SecurityConfig(protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", username_env="FW_BUS_USER",
                                  password_env="FW_BUS_PASSWORD", ssl_cafile=str(listener.ca_file))
        yield cluster.secure_bootstrap[0], security


@pytest.fixture
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FW_BUS_USER", USER)
    monkeypatch.setenv("FW_BUS_PASSWORD", PASSWORD)


def _lines(store: Store) -> set[tuple[str, str]]:
    with store.engine.connect() as conn:
        return set(conn.execute(select(alert_history.c.alert_id, alert_history.c.status)).all())


@pytest.mark.parametrize("source", ["spark", "python"])
def test_the_job_reads_and_publishes_over_sasl_ssl(spark, test_config, secure_bus, credentials, tmp_path, source):
    bootstrap, security = secure_bus
    access = BusAccess.from_config(bootstrap, security)
    sim = Simulation(FleetSpec(clusters=4, brokers=3, faults=("broker.heartbeat_lost", "connection.misrouted"),
                               start_ms=1_764_000_000_000, duration_ms=240_000, seed=3, first_fault_ms=30_000,
                               fault_every_ms=60_000))
    expected = {(a.to_dict()["alert_id"], a.status) for a in detect([event_from_dict(e) for _, e in sim.events()])}
    assert expected
    ensure_topics(access, topics.TELEMETRY, 2)
    sent = produce_live(sim, access, realtime=False).sent
    config = test_config.model_copy(update={
        "bus": test_config.bus.model_copy(update={"bootstrap_servers": bootstrap, "source": source,
                                                  "security": security}),
        "spark": test_config.spark.model_copy(update={"checkpoint_dir": str(tmp_path / "checkpoint"),
                                                      "trigger_ms": 500})})
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    publisher = AlertPublisher(access, partitions=1)
    job = start_live_query(spark, config, access, store, publisher)
    recorder = job.recorder
    try:
        poll(lambda: _lines(store) == expected, 180, lambda: f"the replay's alert lines in the store (missing "
             f"{expected - _lines(store)}, unexpected {_lines(store) - expected})", interval_s=0.5)
        # Progress reaches the listener after the batch's sink: wait for it (a second test's run
        # reads the first's records too).
        assert recorder.wait("fleetwatch", lambda stats: stats.input_rows >= sent, timeout_s=30)
    finally:
        job.stop()
        spark.streams.removeListener(recorder)
        publisher.close()
    consumer = KafkaConsumer(topics.ALERTS, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=5000, **access.client_settings)
    published = {m.key.decode() for m in consumer}
    consumer.close()
    assert {alert_id for alert_id, _ in expected} <= published


def test_a_wrong_password_is_a_one_line_error(secure_bus, monkeypatch):
    bootstrap, security = secure_bus
    monkeypatch.setenv("FW_BUS_USER", USER)
    monkeypatch.setenv("FW_BUS_PASSWORD", "not-the-secret")
    with pytest.raises(BusError) as refused:
        # 20 s: at the session's start (the healthy real cluster's JVMs starting beside this broker)
        # every handshake of 10 s once timed out, and the error rightly said only that.
        ensure_topics(BusAccess.from_config(bootstrap, security), [topics.ALERTS], timeout_s=20)
    assert "\n" not in str(refused.value) and "not-the-secret" not in str(refused.value)
    # Why, not only "Unable to bootstrap": what the connections met. That is the refused login
    # when kafka-python saw the broker's answer, and in about half the runs of this module it saw
    # only the connection the broker dropped after it ("socket disconnected"). A handshake that
    # timed out on a loaded machine says less than either: the refusal is named when any try met it.
    reason = str(refused.value).split("; connection failed: ", 1)[1]
    assert reason.startswith(("SaslAuthenticationFailedError", "KafkaConnectionError")), reason


def test_a_bus_nobody_listens_on_is_a_one_line_error_that_says_so():
    with pytest.raises(BusError) as refused:
        ensure_topics(f"127.0.0.1:{free_port()}", [topics.ALERTS], timeout_s=2)
    assert "\n" not in str(refused.value)
    assert str(refused.value).endswith("; connection failed: KafkaConnectionError: 111 ECONNREFUSED")


def test_a_missing_credential_variable_is_named(secure_bus, monkeypatch):
    bootstrap, security = secure_bus
    monkeypatch.delenv("FW_BUS_PASSWORD", raising=False)
    monkeypatch.setenv("FW_BUS_USER", USER)
    with pytest.raises(ConfigError, match="FW_BUS_PASSWORD"):
        BusAccess.from_config(bootstrap, security)
    assert PASSWORD not in repr(BusAccess(bootstrap, {"sasl_plain_password": PASSWORD}))
