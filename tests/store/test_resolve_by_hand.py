"""A resolved alert is final, and an operator resolves a stuck one by hand (issue 41.3), on both
databases the store supports (a SQLite file, a fresh database on the session's real PostgreSQL):
whatever detection records of the same alert later, its row, history and outbox stay the first
resolution's."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from streaming.plumbing.errors import ConfigError
from streaming.records.alert import Alert
from streaming.store import Store, alert_history, alerts, outbox


@pytest.fixture
def store(store_url):
    s = Store(store_url)
    yield s
    s.close()


def _line(status: str = "firing", ends_at: int | None = None, **details) -> Alert:
    return Alert.from_dict({
        "schema": "fleetwatch.alert/v1", "alert_id": "a1", "rule": "broker.heartbeat_lost", "status": status,
        "severity": "critical", "cluster_id": "c1", "target": "pay", "broker_id": 3, "endpoint": None,
        "starts_at": 1000, "ends_at": ends_at, "summary": "broker 3 lost its heartbeats",
        "details": {"last_heartbeat_ms": 900, **details}})


def _recorded(store: Store) -> tuple[dict, list[tuple[str, dict]], list[tuple[str, dict]]]:
    """The alert's row, and its (status, body details) in the history and in the outbox."""
    with store.engine.connect() as conn:
        row = dict(conn.execute(select(alerts)).mappings().one())
        history = [(r.status, json.loads(r.body)["details"])
                   for r in conn.execute(select(alert_history).order_by(alert_history.c.id))]
        box = [(r.status, json.loads(r.body)["details"]) for r in conn.execute(select(outbox).order_by(outbox.c.id))]
    return row, history, box


def test_a_resolved_alert_keeps_its_first_resolution(store):
    store.record_alerts([_line()])
    store.record_alerts([_line("resolved", 5000, reason="heartbeat")])
    first = _recorded(store)
    # Another resolution of the same alert (another writer's), then a replayed firing line.
    store.record_alerts([_line("resolved", 9000, reason="another")])
    store.record_alerts([_line()])
    assert _recorded(store) == first
    row, history, box = first
    assert (row["status"], row["ends_at"], row["details"]["reason"]) == ("resolved", 5000, "heartbeat")
    assert [status for status, _ in history] == [status for status, _ in box] == ["firing", "resolved"]


def test_an_operator_resolves_a_stuck_alert_and_detection_changes_nothing_after(store):
    store.record_alerts([_line()])
    resolution = store.resolve_by_hand("a1", 70_000, reason="target decommissioned", resolved_by="sre-ana")
    assert (resolution.status, resolution.ends_at) == ("resolved", 70_000)
    row, history, box = _recorded(store)
    by_hand = {"last_heartbeat_ms": 900, "reason": "target decommissioned", "resolved_by": "sre-ana"}
    assert (row["status"], row["ends_at"], row["details"]) == ("resolved", 70_000, by_hand)
    assert history == box == [("firing", {"last_heartbeat_ms": 900}), ("resolved", by_hand)]

    # Detection resolves it later (its own time and reason), then fires the same alert again (a
    # replayed batch): the operator's resolution stands, nothing new goes to the outbox.
    store.record_alerts([_line("resolved", 90_000, reason="heartbeat")])
    store.record_alerts([_line()])
    assert _recorded(store) == (row, history, box)

    with pytest.raises(ConfigError, match=r"^alert a1 is already resolved \(ended 1970-01-01T00:01:10.000Z\)$"):
        store.resolve_by_hand("a1", 80_000, reason="again", resolved_by="sre-bo")
    with pytest.raises(ConfigError, match=r"^no alert with id 'nope' \(see `fleetwatch alerts list`\)$"):
        store.resolve_by_hand("nope", 80_000, reason="typo", resolved_by="sre-bo")
    assert _recorded(store) == (row, history, box)


def test_an_alert_resolved_by_detection_cannot_be_resolved_by_hand(store):
    store.record_alerts([_line(), _line("resolved", 5000)])
    with pytest.raises(ConfigError, match="already resolved"):
        store.resolve_by_hand("a1", 80_000, reason="late", resolved_by="sre-bo")
    assert store.alerts_newest_first(firing_only=True, limit=10) == []
    assert [a.status for a in store.alerts_newest_first(firing_only=False, limit=10)] == ["resolved"]
