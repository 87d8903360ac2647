"""A probe that goes silent is blindness, not the silence of the brokers it watches (issue 41.2), on a real
Apache Kafka 4.4 cluster with Kafka's default sessions (the session's healthy cluster) and the real
`fleetwatch probe` as a process of its own, frozen with SIGSTOP.

Measured on main 69ef28b: three healthy clusters, the probe frozen for 20 s: a critical
`broker.heartbeat_lost` for every broker it watches, resolved at its next round. The probe now says
when each round ended (`collector_round`): detection holds the brokers' deadlines until a round shows
them silent, restarts their sessions after a gap longer than a session, and raises one
`collector.silent` (warning) for the probe instead.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.healthy_kafka import SESSION_TIMEOUT_MS, HealthyWatch

from streaming.config import FleetwatchConfig
from streaming.detect import detect
from streaming.plumbing import clock
from streaming.records.contract import event_from_dict
from streaming.workshop.polling import poll

pytestmark = [pytest.mark.real_kafka, pytest.mark.integration]

FREEZE_S = 20  # the fault: longer than two broker sessions (9 s, Kafka's default)
SOURCE = "probe-frozen"
BOOK = FleetwatchConfig.model_validate({"rules": {"session_timeout_ms": SESSION_TIMEOUT_MS}}).rule_book()


def _events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def _rounds(path: Path) -> list[int]:
    """When the probe's rounds ended: its full rounds and its quorum readings (each is a round of its
    collector, streaming/detect/README.md)."""
    return [ev["ts"] for ev in _events(path) if ev["type"] in ("collector_round", "quorum_reading")]


def test_a_frozen_probe_pages_no_broker_and_says_it_was_silent(healthy_real_kafka: HealthyWatch, tmp_path: Path):
    healthy_real_kafka.watched_s()  # the cluster is up
    config, out, ready = tmp_path / "fleetwatch.yaml", tmp_path / "events.jsonl", tmp_path / "ready"
    config.write_text(yaml.safe_dump({"clusters": [{"name": "watched",
                                                    "bootstrap": healthy_real_kafka.cluster.bootstrap}]}))
    probe = subprocess.Popen(
        [sys.executable, "-m", "streaming.cli", "probe", "--config", str(config), "--out", str(out),
         "--interval-ms", "1000", "--timeout-ms", "900", "--source", SOURCE, "--ready-file", str(ready)],
        stdout=subprocess.DEVNULL, stderr=(tmp_path / "probe.log").open("wb"), env={**os.environ})
    try:
        poll(ready.exists, 60, "the probe ready (its first round published)")
        brokers = poll(lambda: len(seen := {ev["broker_id"] for ev in _events(out)
                                            if ev["type"] == "broker_heartbeat"}) >= 3 and seen, 60,
                       "heartbeats of every broker")
        os.kill(probe.pid, signal.SIGSTOP)
        frozen_ms = clock.now_ms()
        time.sleep(FREEZE_S)  # the fault's length, not a synchronisation: the probe is frozen meanwhile
        thawed_ms = clock.now_ms()
        os.kill(probe.pid, signal.SIGCONT)
        # The return is applied once detection's watermark (the newest event less the allowed lateness)
        # passes the first round after the thaw: the rounds go on until it has.
        lateness = BOOK.defaults.allowed_lateness_ms
        poll(lambda: len(after := [ts for ts in _rounds(out) if ts > frozen_ms]) >= 3
             and max(after) > min(after) + lateness + 1000, 60, "rounds past the allowed lateness after the thaw")
        probe.send_signal(signal.SIGTERM)
        assert probe.wait(timeout=30) == 0
        assert not ready.exists(), "the ready file outlived the probe"
    finally:
        if probe.poll() is None:
            os.kill(probe.pid, signal.SIGCONT)
            probe.kill()
            probe.wait(timeout=30)
    raw = _events(out)
    events = [event_from_dict(ev) for ev in raw]
    rounds = _rounds(out)
    last_before = max(ts for ts in rounds if ts < frozen_ms)
    first_after = min(ts for ts in rounds if ts > frozen_ms)
    assert first_after - last_before > FREEZE_S * 1000 - 2000, "the freeze left no gap in the rounds"

    # What the same events gave before the probe said its rounds (main 69ef28b): every broker paged.
    blind = detect([e for e in events if e.type not in ("collector_round", "collector_targets", "quorum_reading")],
                   BOOK)
    assert {a.broker_id for a in blind if a.rule == "broker.heartbeat_lost"} == set(brokers)

    alerts = detect(events, BOOK)
    print(f"\nfrozen {FREEZE_S} s: rounds {last_before - frozen_ms} ms before the freeze and "
          f"{first_after - thawed_ms} ms after the thaw; before the fix {len(blind)} alert lines, now {len(alerts)}")
    assert [(a.rule, a.status, a.source, a.starts_at, a.ends_at) for a in alerts] == [
        ("collector.silent", "firing", SOURCE, last_before + SESSION_TIMEOUT_MS, None),
        ("collector.silent", "resolved", SOURCE, last_before + SESSION_TIMEOUT_MS, first_after)]
    (silent, _) = alerts
    assert [c["target"] for c in silent.details["clusters"]] == ["watched"]
    assert any(ev["type"] == "collector_targets" and ev["targets"] == ["watched"] for ev in raw)
