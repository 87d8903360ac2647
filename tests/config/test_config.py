"""Configuration (SPEC section 6): defaults, per-cluster overrides, strict validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from streaming.config import ClusterConfig, ConfigError, RuleBook, RuleSettings, load_config

# The defaults named in SPEC section 4 (and the watermark's allowed lateness).
SPEC_DEFAULTS = {
    "allowed_lateness_ms": 5000,
    "session_timeout_ms": 9000,
    "heartbeat_late_ratio": None,  # issue 31: broker.heartbeat_late is off unless set
    "stall_after_ms": 2500,  # issue 44: broker.stalled, on by default
    "heartbeat_interval_ms": 2000,  # SPEC section 1: Kafka's broker.heartbeat.interval.ms default
    "fenced_grace_ms": 30000,
    "partition_window_ms": 15000,
    "stopping_timeout_ms": 120000,
    "resolve_after_ms": 60000,
    "flap_threshold": 4,
    "flap_window_ms": 300000,
    "controller_window_ms": 15000,
    "controller_flap_threshold": 3,
    "controller_flap_window_ms": 300000,
    "disagreement_ms": 30000,
    "unreachable_ms": 30000,
    "forget_after_ms": 600000,
    "state_ttl_ms": 86_400_000,  # not SPEC's: issue 7 (state TTLs), one day
    "max_clock_skew_ms": 300_000,  # SPEC section 3, amended 2026-11-24
    # Not SPEC's: issue 26 point 3 (SPEC section 3, amended 2026-11-26, asks for a bound and names
    # no value). An accepted lead moves the watermark as far: 1 s leaves 4 s of the 5 s lateness.
    "max_source_lead_ms": 1000,
}

# SPEC section 6, verbatim.
SPEC_SAMPLE = """\
bus: {bootstrap_servers: "127.0.0.1:9092"}          # omitted: the embedded broker
store: {url: "sqlite:///var/fleetwatch.db"}         # or postgresql+psycopg://user@host/db
rules: {session_timeout_ms: 9000, fenced_grace_ms: 30000}   # any rule setting of section 4
clusters:
  - name: payments-eu1
    bootstrap: ["b1.pay:9092", "b2.pay:9092"]
    expected_cluster_id: MkU3OEVBNTcwNTJENDM2Qg    # optional; pins the identity
    tags: {env: prod, region: eu-west-1}
    rules: {session_timeout_ms: 12000}             # per-cluster override
    security: {protocol: SASL_SSL, sasl_mechanism: SCRAM-SHA-512, username_env: PAY_USER, password_env: PAY_PASS}
alerting:
  receivers:
    - {name: ops, type: webhook, url: "https://hooks.example/fleet", secret_env: FLEETWATCH_WEBHOOK_SECRET}
    - {name: pager, type: pagerduty, routing_key_env: PD_KEY}
    - {name: am, type: alertmanager, url: "http://127.0.0.1:9093"}
    - {name: chat, type: slack, url_env: SLACK_WEBHOOK_URL}
  routes:
    - {receiver: pager, match: {severity: [critical]}}
    - {receiver: ops}                                 # no match: everything
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fleetwatch.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def config_error(tmp_path: Path, text: str) -> str:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert "\n" not in message, "a config error is one line"
    assert str(path) in message, "a config error names the file"
    return message


# -- defaults -----------------------------------------------------------------------------------


def test_rule_defaults_equal_spec():
    assert RuleSettings().model_dump() == SPEC_DEFAULTS


def test_no_config_file_gives_spec_defaults():
    config = load_config(None)
    assert config.rules.model_dump() == SPEC_DEFAULTS
    assert config.clusters == []
    assert config.bus.bootstrap_servers is None  # the embedded broker
    assert config.store.url == "sqlite:///var/fleetwatch.db"


@pytest.mark.parametrize("text", ["", "# only a comment\n", "{}\n"])
def test_empty_file_gives_spec_defaults(tmp_path, text):
    assert load_config(write(tmp_path, text)).rules.model_dump() == SPEC_DEFAULTS


def test_shipped_config_loads():
    shipped = Path(__file__).resolve().parents[2] / "conf" / "fleetwatch.yaml"
    if not shipped.exists():
        pytest.skip(f"{shipped} is not there")
    load_config(shipped)


# -- the SPEC sample ----------------------------------------------------------------------------


def test_spec_sample_config_loads(tmp_path):
    config = load_config(write(tmp_path, SPEC_SAMPLE))
    assert config.bus.bootstrap_servers == "127.0.0.1:9092"
    assert config.store.url == "sqlite:///var/fleetwatch.db"
    assert config.rules.model_dump() == SPEC_DEFAULTS
    (cluster,) = config.clusters
    assert cluster.name == "payments-eu1"
    assert cluster.bootstrap == ["b1.pay:9092", "b2.pay:9092"]
    assert cluster.expected_cluster_id == "MkU3OEVBNTcwNTJENDM2Qg"
    assert cluster.tags == {"env": "prod", "region": "eu-west-1"}
    assert cluster.rules.session_timeout_ms == 12000
    assert (cluster.security.protocol, cluster.security.sasl_mechanism, cluster.security.username_env,
            cluster.security.password_env) == ("SASL_SSL", "SCRAM-SHA-512", "PAY_USER", "PAY_PASS")
    assert [(r.name, r.type) for r in config.alerting.receivers] == [
        ("ops", "webhook"), ("pager", "pagerduty"), ("am", "alertmanager"), ("chat", "slack")]
    ops = config.alerting.receivers[0]
    assert (ops.url, ops.secret_env) == ("https://hooks.example/fleet", "FLEETWATCH_WEBHOOK_SECRET")
    assert [(r.receiver, r.match) for r in config.alerting.routes] == [
        ("pager", {"severity": ["critical"]}), ("ops", {})]

    book = config.rule_book()
    assert book.for_target("payments-eu1").session_timeout_ms == 12000
    assert book.for_cluster("MkU3OEVBNTcwNTJENDM2Qg").session_timeout_ms == 12000
    assert book.pinned_ids == {"payments-eu1": "MkU3OEVBNTcwNTJENDM2Qg"}
    # everything else stays at the global value
    assert book.for_target("payments-eu1").fenced_grace_ms == 30000
    assert book.for_target("other").session_timeout_ms == 9000


# -- per-cluster overrides ----------------------------------------------------------------------


def _book() -> RuleBook:
    glob = RuleSettings(fenced_grace_ms=20000, unreachable_ms=40000)
    return RuleBook(glob, [
        ClusterConfig(name="pinned", expected_cluster_id="PinnedPinnedPinnedPinA",
                      rules={"session_timeout_ms": 12000}),
        ClusterConfig(name="byname", rules={"unreachable_ms": 10000, "flap_threshold": 6}),
        ClusterConfig(name="plain"),
    ])


def test_override_by_target_name():
    book = _book()
    s = book.for_target("byname")
    assert (s.unreachable_ms, s.flap_threshold) == (10000, 6)
    assert s.fenced_grace_ms == 20000, "global settings still apply to an overriding cluster"
    assert s.session_timeout_ms == 9000, "defaults still apply to settings nobody set"
    # the cluster id of an unpinned cluster is unknown: it is found by the target its responses carry
    assert book.for_cluster("SomeIdSomeIdSomeIdSomA", "byname").unreachable_ms == 10000
    assert book.for_cluster("SomeIdSomeIdSomeIdSomA").unreachable_ms == 40000


def test_override_by_expected_cluster_id():
    book = _book()
    assert book.for_cluster("PinnedPinnedPinnedPinA").session_timeout_ms == 12000
    assert book.for_target("pinned").session_timeout_ms == 12000
    # the pinned id wins over a target name that carries no override
    assert book.for_cluster("PinnedPinnedPinnedPinA", "plain").session_timeout_ms == 12000
    assert book.pinned_ids == {"pinned": "PinnedPinnedPinnedPinA"}


def test_unknown_or_plain_cluster_gets_global_settings():
    book = _book()
    for s in (book.for_target("plain"), book.for_target("nobody"), book.for_target(None),
              book.for_cluster(None), book.for_cluster("OtherOtherOtherOtherOA", "nobody")):
        assert (s.session_timeout_ms, s.fenced_grace_ms, s.unreachable_ms, s.flap_threshold) == (
            9000, 20000, 40000, 4)


def test_global_rules_from_file_and_per_cluster_override(tmp_path):
    config = load_config(write(tmp_path, """\
rules: {session_timeout_ms: 6000, flap_threshold: 5}
clusters:
  - {name: a, rules: {flap_threshold: 8}}
  - {name: b}
"""))
    book = config.rule_book()
    assert (book.for_target("a").session_timeout_ms, book.for_target("a").flap_threshold) == (6000, 8)
    assert (book.for_target("b").session_timeout_ms, book.for_target("b").flap_threshold) == (6000, 5)


# -- strict validation --------------------------------------------------------------------------


def test_unknown_top_level_key(tmp_path):
    message = config_error(tmp_path, "rules: {}\nstorage: {url: 'sqlite://'}\n")
    assert "storage" in message and "unknown key" in message


def test_unknown_rule_setting(tmp_path):
    message = config_error(tmp_path, "rules: {session_timout_ms: 9000}\n")
    assert "rules.session_timout_ms" in message and "unknown key" in message


def test_unknown_key_in_a_cluster(tmp_path):
    message = config_error(tmp_path, "clusters:\n  - {name: a, bootstrap_servers: ['x:9092']}\n")
    assert "clusters.0.bootstrap_servers" in message and "unknown key" in message


def test_unknown_key_in_a_cluster_rules(tmp_path):
    message = config_error(tmp_path, "clusters:\n  - {name: a}\n  - {name: b, rules: {grace: 1}}\n")
    assert "clusters.1.rules.grace" in message and "unknown key" in message


def test_lateness_is_not_a_per_cluster_setting(tmp_path):
    # The watermark is global; a per-cluster lateness would be silently meaningless.
    message = config_error(tmp_path, "clusters:\n  - {name: a, rules: {allowed_lateness_ms: 1}}\n")
    assert "clusters.0.rules.allowed_lateness_ms" in message


@pytest.mark.parametrize("name", ["max_clock_skew_ms", "max_source_lead_ms"])
def test_the_bounds_of_event_times_are_not_per_cluster_settings(tmp_path, name):
    # They bound what one source moves the fleet-wide watermark by: the job's, not a cluster's.
    message = config_error(tmp_path, f"clusters:\n  - {{name: a, rules: {{{name}: 1}}}}\n")
    assert f"clusters.0.rules.{name}" in message and "unknown key" in message


@pytest.mark.parametrize(("text", "where"), [
    ("rules: {max_source_lead_ms: -1}\n", "rules.max_source_lead_ms: Input should be greater than or equal to 0"),
    ("rules: {max_source_lead_ms: '1000'}\n", "rules.max_source_lead_ms: Input should be a valid integer"),
    ("rules: {max_source_lead_ms: 300001}\n",
     "rules.max_source_lead_ms must be at most rules.max_clock_skew_ms (300001 > 300000)"),
    ("rules: {max_clock_skew_ms: 500}\n", "rules.max_source_lead_ms must be at most rules.max_clock_skew_ms"),
])
def test_the_source_lead_is_bounded(tmp_path, text, where):
    assert where in config_error(tmp_path, text)


def test_a_source_lead_within_the_clock_skew_is_accepted(tmp_path):
    rules = load_config(write(tmp_path, "rules: {max_source_lead_ms: 0, max_clock_skew_ms: 0}\n")).rules
    assert (rules.max_source_lead_ms, rules.max_clock_skew_ms) == (0, 0)


def test_state_ttl_is_not_a_per_cluster_setting(tmp_path):
    message = config_error(tmp_path, "clusters:\n  - {name: a, rules: {state_ttl_ms: 900000000}}\n")
    assert "clusters.0.rules.state_ttl_ms" in message


@pytest.mark.parametrize(("text", "longest"), [
    ("rules: {state_ttl_ms: 600000}\n", "rules.forget_after_ms = 600000"),
    ("rules: {state_ttl_ms: 700000, flap_window_ms: 800000}\n", "rules.flap_window_ms = 800000"),
    ("rules: {state_ttl_ms: 700000}\nclusters:\n  - {name: a, rules: {stopping_timeout_ms: 700000}}\n",
     "clusters[0].rules.stopping_timeout_ms = 700000"),
])
def test_state_ttl_must_outlive_every_rule_window(tmp_path, text, longest):
    # Forgetting a quiet subject must never cut a rule's window short.
    message = config_error(tmp_path, text)
    assert "rules.state_ttl_ms" in message and longest in message


def test_state_ttl_just_past_every_window_is_accepted(tmp_path):
    assert load_config(write(tmp_path, "rules: {state_ttl_ms: 600001}\n")).rules.state_ttl_ms == 600001


def test_unknown_key_in_a_receiver(tmp_path):
    message = config_error(tmp_path, "alerting:\n  receivers:\n    - {name: o, type: webhook, uri: 'http://x'}\n")
    assert "alerting.receivers.0.uri" in message


@pytest.mark.parametrize(("text", "path"), [
    ("rules: {session_timeout_ms: soon}\n", "rules.session_timeout_ms"),
    ("rules: {session_timeout_ms: 0}\n", "rules.session_timeout_ms"),
    ("rules: {flap_threshold: 1}\n", "rules.flap_threshold"),
    ("clusters:\n  - {name: a, expected_cluster_id: 'not valid!'}\n", "clusters.0.expected_cluster_id"),
    ("clusters:\n  - {bootstrap: ['x:9092']}\n", "clusters.0.name"),
    ("alerting:\n  receivers:\n    - {name: o, type: email}\n", "alerting.receivers.0.type"),
])
def test_bad_values_name_their_path(tmp_path, text, path):
    assert path in config_error(tmp_path, text)


@pytest.mark.parametrize("text", ["rules: {session_timeout_ms: 9000\n", "a: b: c\n", "clusters:\n\t- x\n"])
def test_invalid_yaml(tmp_path, text):
    assert "not valid YAML" in config_error(tmp_path, text)


@pytest.mark.parametrize("text", ["- rules\n- clusters\n", "just a string\n", "42\n"])
def test_top_level_must_be_a_mapping(tmp_path, text):
    assert "mapping" in config_error(tmp_path, text)


def test_missing_file(tmp_path):
    path = tmp_path / "absent.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_route_to_unknown_receiver_is_refused(tmp_path):
    message = config_error(tmp_path, """\
alerting:
  receivers:
    - {name: ops, type: webhook, url: "https://hooks.example/fleet"}
  routes:
    - {receiver: ops}
    - {receiver: pager, match: {severity: [critical]}}
""")
    assert "pager" in message and "routes[1]" in message


def test_duplicate_cluster_names_are_refused(tmp_path):
    message = config_error(tmp_path, "clusters:\n  - {name: a}\n  - {name: a}\n")
    assert "clusters[1].name" in message


@pytest.mark.parametrize(("text", "path"), [
    ("rules: {session_timeout_ms: true}\n", "rules.session_timeout_ms"),  # not 1 ms
    ("rules: {session_timeout_ms: '9000'}\n", "rules.session_timeout_ms"),
    ("rules: {session_timeout_ms: 9000.5}\n", "rules.session_timeout_ms"),
    ("bus: {partitions: '3'}\n", "bus.partitions"),
    ("bus: {fail_on_data_loss: 'yes'}\n", "bus.fail_on_data_loss"),
    ("clusters:\n  - {name: a, tags: {tier: 1}}\n", "clusters.0.tags.tier"),
])
def test_values_of_the_wrong_type_are_refused_not_coerced(tmp_path, text, path):
    assert path in config_error(tmp_path, text)


def test_a_plain_password_over_plaintext_needs_an_explicit_yes(tmp_path):
    cleartext = ("clusters:\n  - name: a\n    security: {protocol: SASL_PLAINTEXT, sasl_mechanism: PLAIN, "
                 "username_env: U, password_env: P")
    assert "clusters.0.security" in config_error(tmp_path, cleartext + "}\n")
    assert "in clear text" in config_error(tmp_path, cleartext + "}\n")
    allowed = load_config(write(tmp_path, cleartext + ", allow_cleartext_password: true}\n"))
    assert allowed.clusters[0].security.allow_cleartext_password
    for protected in ("SASL_SSL, sasl_mechanism: PLAIN", "SASL_PLAINTEXT, sasl_mechanism: SCRAM-SHA-512"):
        load_config(write(tmp_path, f"clusters:\n  - name: a\n    security: {{protocol: {protected}, "
                                    "username_env: U, password_env: P}\n"))


def test_the_bus_takes_the_same_security_settings(tmp_path):
    config = load_config(write(tmp_path, "bus: {bootstrap_servers: 'k:9093', security: {protocol: SASL_SSL, "
                                         "sasl_mechanism: SCRAM-SHA-512, username_env: U, password_env: P}}\n"))
    assert config.bus.security.protocol == "SASL_SSL"
    assert "bus.security" in config_error(tmp_path, "bus: {security: {protocol: SASL_PLAINTEXT, sasl_mechanism: PLAIN, "
                                                    "username_env: U, password_env: P}}\n")
