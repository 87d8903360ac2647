"""The worked examples beside the SPEC (shared/examples): detect() must give the expected lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.paths import EXAMPLES

from streaming.detect import detect
from streaming.records.contract import parse_message

NAMES = ("heartbeat-and-fence", "misroute", "identity", "controller")
# The fields the examples README says decide correctness.
FIELDS = ("status", "rule", "severity", "cluster_id", "target", "broker_id", "endpoint", "starts_at", "ends_at")

pytestmark = pytest.mark.skipif(not EXAMPLES.is_dir(), reason=f"worked examples not found at {EXAMPLES}")


def _jsonl(path: Path) -> list[Any]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _alerts(name: str, batch_size: int | None = None) -> list[dict[str, Any]]:
    raw = (EXAMPLES / f"{name}.jsonl").read_bytes().splitlines()
    events = [parse_message(line) for line in raw if line.strip()]
    return [a.to_dict() for a in detect(events, batch_size=batch_size)]


def test_all_four_examples_are_there():
    for name in NAMES:
        assert (EXAMPLES / f"{name}.jsonl").is_file()
        assert (EXAMPLES / f"{name}.expected.jsonl").is_file()


@pytest.mark.parametrize("batch_size", [None, 1, 5])
@pytest.mark.parametrize("name", NAMES)
def test_example_gives_the_expected_alerts(name, batch_size):
    expected = [{f: line[f] for f in FIELDS} for line in _jsonl(EXAMPLES / f"{name}.expected.jsonl")]
    got = [{f: alert[f] for f in FIELDS} for alert in _alerts(name, batch_size)]
    assert got == expected


@pytest.mark.parametrize("name", NAMES)
def test_alert_id_is_one_per_incident(name):
    alerts = _alerts(name)
    incidents: dict[tuple[Any, ...], set[str]] = {}
    for a in alerts:
        key = (a["rule"], a["cluster_id"], a["target"], a["broker_id"], a["endpoint"], a["starts_at"])
        incidents.setdefault(key, set()).add(a["alert_id"])
    # the firing and the resolved line of one incident share one id ...
    assert all(len(ids) == 1 for ids in incidents.values()), incidents
    # ... and different incidents have different ids
    ids = [next(iter(v)) for v in incidents.values()]
    assert len(set(ids)) == len(ids)
    for a in alerts:
        assert len(a["alert_id"]) == 32 and int(a["alert_id"], 16) >= 0
    statuses = {(a["alert_id"], a["status"]) for a in alerts}
    assert len(statuses) == len(alerts), "one firing and at most one resolved line per incident"


def test_resolved_lines_repeat_their_firing_line():
    for name in NAMES:
        alerts = _alerts(name)
        firing = {a["alert_id"]: a for a in alerts if a["status"] == "firing"}
        for a in alerts:
            if a["status"] == "resolved":
                f = firing[a["alert_id"]]
                assert alerts.index(f) < alerts.index(a)
                assert {k: v for k, v in a.items() if k not in ("status", "ends_at")} == {
                    k: v for k, v in f.items() if k not in ("status", "ends_at")}
                assert a["ends_at"] >= a["starts_at"] and f["ends_at"] is None
