"""No object holding a secret shows it when printed or logged (issue 27.4).

Every dataclass or model that holds a password, a signing secret, a routing key or a URL that may be
one: its repr, its str, an f-string and a log line (the project's JSON lines) never contain the
value. And the probe still authenticates with the password it no longer shows: SCRAM-SHA-512 over
SASL_SSL against a real Kafka 4.4 broker.
"""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streaming.bus import BusAccess
from streaming.collect.probe import ProbeOptions, Prober, targets_from_config
from streaming.collect.protocol import Security
from streaming.config import ClusterConfig, FleetwatchConfig, Receiver, SecurityConfig, StoreConfig
from streaming.notify.receivers import build_receivers
from streaming.plumbing.logs import JsonFormatter
from streaming.source.kafka_options import KafkaReaderOptions
from streaming.workshop.kraft import SecureListener

PASSWORD = "pw-7f3c9a-never-shown"
USER = "fleetwatch-probe"


def _shown(obj: Any) -> str:
    """Every way an object reaches a log or a screen: repr, str, f-string, %-logging, and a log
    record's extra field, through the project's JSON formatter."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("test.secret_reprs")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("shown %s %r", obj, obj, extra={"obj": obj})
    finally:
        logger.removeHandler(handler)
    return "\n".join([repr(obj), str(obj), f"{obj} {obj!r}", out.getvalue()])


def _security_config(**kw: Any) -> SecurityConfig:
    return SecurityConfig(protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", username_env="FW_PROBE_USER",
                          password_env="FW_PROBE_PASSWORD", **kw)


def _probe_config(bootstrap: str, **kw: Any) -> FleetwatchConfig:
    return FleetwatchConfig(clusters=[ClusterConfig(name="secure", bootstrap=[bootstrap],
                                                    security=_security_config(**kw))])


ENV = {"FW_PROBE_USER": USER, "FW_PROBE_PASSWORD": PASSWORD}


def test_the_probes_security_and_target_never_show_the_password():
    (target,) = targets_from_config(_probe_config("127.0.0.1:9093"), environ=ENV)
    assert target.security.password == PASSWORD  # held, for the SASL exchange
    for obj in (target, target.security, [target], Security(protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                                                            username=USER, password=PASSWORD)):
        shown = _shown(obj)
        assert PASSWORD not in shown, shown
    assert USER in repr(target)  # the rest is still there to debug with


def test_the_receivers_never_show_their_secrets():
    hook = "https://hooks.slack.example/services/T000/B000/slack-path-secret"
    configs = [Receiver(name="ops", type="webhook", url="https://hooks.example/fleet", secret_env="FW_SIGN"),
               Receiver(name="pager", type="pagerduty", routing_key_env="FW_PD_KEY"),
               Receiver(name="chat", type="slack", url_env="FW_SLACK"),
               Receiver(name="inline", type="slack", url=hook)]
    env = {"FW_SIGN": "sign-secret-4d2e", "FW_PD_KEY": "routing-key-9b1a", "FW_SLACK": hook}
    receivers = build_receivers(configs, env)
    for obj in (*receivers.values(), receivers, configs[3], FleetwatchConfig.model_validate(
            {"alerting": {"receivers": [configs[3].model_dump(exclude_none=True)]}})):
        shown = _shown(obj)
        for secret in (*env.values(), "slack-path-secret"):
            assert secret not in shown, (secret, shown)


def test_a_store_url_bus_access_and_reader_options_never_show_a_password(tmp_path):
    url = f"postgresql+psycopg://fleetwatch:{PASSWORD}@db.example/fleetwatch"
    settings = {"security_protocol": "SASL_SSL", "sasl_plain_password": PASSWORD}
    for obj in (StoreConfig(url=url), FleetwatchConfig(store=StoreConfig(url=url)),
                BusAccess("127.0.0.1:9093", settings, {"kafka.sasl.jaas.config": f"password=\"{PASSWORD}\";"}),
                KafkaReaderOptions("127.0.0.1:9093", ("t",), client_settings=tuple(settings.items())),
                SecureListener(tmp_path, USER, PASSWORD)):
        shown = _shown(obj)
        assert PASSWORD not in shown, shown


# -- the probe still authenticates: a real Kafka 4.4 broker with SASL_SSL (SCRAM-SHA-512) -----------



@pytest.fixture(scope="module")
def secure_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    from streaming.workshop.kraft import KRaftCluster

    workdir = tmp_path_factory.mktemp("secure-kafka")
    listener = SecureListener.create(workdir / "tls", USER, PASSWORD)
    with KRaftCluster(workdir / "kafka", brokers=1, secure=listener) as cluster:
        yield cluster.secure_bootstrap[0], listener.ca_file


@pytest.mark.real_kafka
def test_the_probe_authenticates_with_the_password_it_does_not_show(secure_kafka, caplog):
    bootstrap, ca_file = secure_kafka
    config = _probe_config(bootstrap, ssl_cafile=str(ca_file))
    options = ProbeOptions(timeout_ms=10_000, source="probe-test")
    (target,) = targets_from_config(config, environ=ENV)
    with caplog.at_level(logging.DEBUG):
        events = asyncio.run(Prober([target], options).probe_round_async())
    answers = [e for e in events if e["type"] == "metadata_response"]
    assert answers and {e["error"] for e in answers} == {None}, answers
    assert PASSWORD not in caplog.text and PASSWORD not in repr(events)
    (wrong,) = targets_from_config(config, environ={**ENV, "FW_PROBE_PASSWORD": "not-the-password"})
    refused = asyncio.run(Prober([wrong], options).probe_round_async())
    assert {e["error"] for e in refused if e["type"] == "metadata_response"} == {"AUTH_FAILED"}
