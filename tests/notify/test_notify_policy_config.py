"""Delivery policies (issue 19) checked without a notifier running: an unknown route `match` key or
value is a config error, in one line, at load, from `fleetwatch notify` and from `check-config`;
`Retry-After` of any shape parses to a bounded delay or to nothing, and never raises.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from support.paths import ROOT

from streaming.config import ConfigError, FleetwatchConfig, load_config, longest_attempt_ms
from streaming.notify.policy import parse_retry_after
from streaming.workshop.hooks import env_with


@pytest.mark.integration
@pytest.mark.parametrize(("match", "words"), [
    ({"severty": ["critical"]}, "unknown key"),
    ({"severity": ["crtical"]}, "'crtical' matches no severity"),
    ({"status": ["fired"]}, "'fired' matches no status"),
    ({"rule": ["broker.fen\u0441ed"]}, "matches no rule"),
    ({"region": ["eu-west-1"]}, "unknown key"),
])
def test_a_route_match_typo_is_a_config_error(tmp_path, match, words):
    (field,) = match
    cfg = {"clusters": [{"name": "pay", "tags": {"env": "prod"}}],
           "alerting": {"receivers": [{"name": "ops", "type": "webhook", "url": "http://127.0.0.1:1/x"}],
                        "routes": [{"receiver": "ops"}, {"receiver": "ops", "match": match}]}}
    file = tmp_path / "fleetwatch.yaml"
    file.write_text(yaml.safe_dump(cfg, sort_keys=False))
    with pytest.raises(ConfigError) as raised:
        load_config(file)
    message = str(raised.value)
    assert "\n" not in message and f"alerting.routes.1.match.{field}: " in message and words in message, message
    done = subprocess.run([sys.executable, "-m", "streaming.notify", "notify", "--config", str(file), "--once"],
                          cwd=ROOT, env=env_with(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0, done.stderr
    assert f"alerting.routes.1.match.{field}: " in done.stderr, done.stderr
    checked = subprocess.run([sys.executable, "-m", "streaming.ops.check_config", str(file)], cwd=ROOT,
                             env=env_with(), capture_output=True, text=True, timeout=60)
    line = next(n for n, text in enumerate(file.read_text().splitlines(), 1) if f"{field}:" in text)
    assert checked.returncode == 2, checked.stdout
    assert f"{file}:{line}: error: alerting.routes[1].match.{field}: " in checked.stdout, checked.stdout


def test_route_match_keys_that_exist_are_accepted():
    config = FleetwatchConfig.model_validate({
        "clusters": [{"name": "pay", "tags": {"env": "prod"}}],
        "alerting": {"receivers": [{"name": "ops", "type": "webhook", "url": "http://127.0.0.1:1/x"}],
                     "routes": [{"receiver": "ops", "match": {
                         "env": ["prod"], "broker": ["1", "2"], "rule": ["broker.*"], "severity": ["crit*"],
                         "status": ["resolved"], "cluster_id": ["Mk*"], "target": ["pay"], "endpoint": ["b1:9092"],
                         "broker_id": ["3"]}}]}})
    assert config.alerting.routes[0].match["env"] == ["prod"]


def test_parse_retry_after_is_bounded_and_never_raises():
    now = 1_763_800_000_000
    cap = 3_600_000
    assert parse_retry_after("7", now, cap) == 7000
    assert parse_retry_after(" 2.5 ", now, cap) == 2500
    assert parse_retry_after("Sat, 22 Nov 2025 08:27:00 GMT", now, cap) == 20_000
    assert parse_retry_after("Sat, 22 Nov 2025 08:00:00 GMT", now, cap) == 0  # in the past
    assert parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT", now, cap) == cap
    for value in ("inf", "Infinity", "1e400", "99999999999999999999999", "-inf"):
        assert parse_retry_after(value, now, cap) in (cap, None), value
    assert parse_retry_after("inf", now, cap) == cap
    for value in ("nan", "NaN", "-5", "-0.5", "", "soon", "٣", "1_000", "0x10", "Mon, 99 Foo 2025 xx:yy GMT",
                  "\udcff", "5, 6", "\x00"):
        assert parse_retry_after(value, now, cap) is None, value
    assert parse_retry_after("0", now, cap) == 0


def test_the_lease_is_configurable_and_bounds_the_attempt(tmp_path):
    from streaming.notify.delivery import Notifier
    from streaming.store import Store

    receivers = [{"name": "ops", "type": "webhook", "url": "http://127.0.0.1:1/x"}]
    # Renewed every third, sending stops min(5 s, a third) before it could run out: 12 s leaves 4 s.
    assert [longest_attempt_ms(ms) for ms in (6_000, 12_000, 30_000, 60_000)] == [2_000, 4_000, 15_000, 35_000]
    for delivery, problem in (({"lease_ms": 5_999}, "lease_ms"), ({"lease_ms": 600_001}, "lease_ms"),
                              ({"lease_ms": 12_000}, "attempt_timeout_ms 10000 is longer than a 12000 ms lease"),
                              ({"lease_ms": 12_000, "attempt_timeout_ms": 4_001}, "longer than a 12000 ms lease")):
        file = tmp_path / "bad.yaml"
        file.write_text(yaml.safe_dump({"alerting": {"receivers": receivers, "delivery": delivery}}))
        with pytest.raises(ConfigError, match=problem):
            load_config(file)
    config = FleetwatchConfig.model_validate({"alerting": {"receivers": receivers, "delivery": {
        "lease_ms": 12_000, "attempt_timeout_ms": 4_000}}})
    store = Store(f"sqlite:///{tmp_path / 'a.db'}")
    notifier = Notifier(config, store, env={})
    assert notifier.lease.ttl_ms == 12_000
    assert notifier.lease.acquire() and notifier.lease.held_for(4.0) and not notifier.lease.held_for(8.5)
    notifier.close()
    store.close()


@pytest.mark.integration
def test_attempt_timeout_is_bounded_in_config_and_on_the_command_line(tmp_path):
    from streaming.notify.delivery import Notifier, NotifyOptions
    from streaming.store import Store

    receivers = [{"name": "ops", "type": "webhook", "url": "http://127.0.0.1:1/x"}]
    for bad in (0, 999, 15_001, "5000", True):
        cfg = {"alerting": {"receivers": receivers, "delivery": {"attempt_timeout_ms": bad}}}
        file = tmp_path / "bad.yaml"
        file.write_text(yaml.safe_dump(cfg))
        with pytest.raises(ConfigError, match="attempt_timeout_ms"):
            load_config(file)
    config = FleetwatchConfig.model_validate({"alerting": {"receivers": receivers,
                                                           "delivery": {"attempt_timeout_ms": 3000}}})
    store = Store(f"sqlite:///{tmp_path / 'a.db'}")
    notifier = Notifier(config, store, env={})
    assert notifier.attempt_s == notifier.sender.timeout_s == 3.0
    notifier.close()
    notifier = Notifier(config, store, NotifyOptions(timeout_s=2.0), env={})
    assert notifier.sender.timeout_s == 2.0, "--timeout wins over the config"
    notifier.close()
    store.close()
    file = tmp_path / "ok.yaml"
    file.write_text(yaml.safe_dump({"alerting": {"receivers": receivers}}))
    for bad in ("0", "0.5", "16"):
        done = subprocess.run([sys.executable, "-m", "streaming.notify", "notify", "--config", str(file), "--once",
                               "--timeout", bad], cwd=ROOT, env=env_with(), capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and "--timeout must be between 1 and 15 s" in done.stderr, done.stderr
