"""The rehearsal's scoring (streaming/workshop/rehearsal/scoring.py) reads a fleet incident notification
as the arrival of each member it tells of (issue 41.4: `make rehearsal` crashed on one with
`KeyError: 'alert_id'`), and scores the rows of issue 41.4 (a removed target's alerts resolved by the
removal, a collector's `collector.silent`). The notification is the notifier's own: a real Notifier (in process, on a
fake clock) over a real SQLite store delivers to the project's real HTTP receiver on 127.0.0.1."""

from __future__ import annotations

import json
import time

from streaming.config import FleetwatchConfig
from streaming.notify import Notifier, NotifyOptions
from streaming.records.alert import Alert, alert_id, queue_subject_of
from streaming.store import Store
from streaming.workshop.fake_clock import FakeClock
from streaming.workshop.hooks import SECRET, Hook, make_alert, rack_fleet_brokers, resolved
from streaming.workshop.rehearsal import TARGET_REMOVED, Fault, RowScore, subject
from streaming.workshop.rehearsal.scoring import now_ms, score_row
from streaming.workshop.rehearsal.targets import subject_of


def test_a_fleet_incident_notification_is_scored_by_its_members(tmp_path):
    hook = Hook().start()
    config = FleetwatchConfig.model_validate({
        "incidents": {"notify_wait_ms": 10_000},
        "alerting": {"receivers": [{"name": "ops", "type": "webhook", "url": hook.url(), "secret_env": "FW_SECRET"}]}})
    clock = FakeClock(time.time() + 5)  # a little ahead: rows just recorded are due
    store = Store(f"sqlite:///{tmp_path / 'fleet.db'}")
    notifier = Notifier(config, store, NotifyOptions(group_wait_ms=0), env={"FW_SECRET": SECRET}, clock=clock)
    try:
        store.write({"brokers": rack_fleet_brokers(clock.ms)})
        since_ms, opened = now_ms(), time.monotonic()
        t0 = clock.ms - 60_000
        members = [make_alert("broker.heartbeat_lost", cluster="c0", broker=1, starts_at=t0),
                   make_alert("broker.heartbeat_lost", cluster="c1", broker=2, starts_at=t0 + 400)]
        other = make_alert("broker.heartbeat_lost", cluster="c2", broker=1, starts_at=t0 + 200)
        store.record_alerts(map(Alert.from_dict, [*members, other]))
        notifier.run(once=True)  # the unrelated alert; the members wait for their incident
        clock.advance(10)
        notifier.run(once=True)  # the incident: one notification telling of both members
        store.record_alerts(map(Alert.from_dict, [resolved(a, t0 + 90_000) for a in [*members, other]]))
        notifier.run(once=True)  # every resolve on its own
        bodies = [json.loads(a["body"]) for a in hook.got()]
        assert [b["schema"] for b in bodies] == ["fleetwatch.alert/v1", "fleetwatch.incident/v1",
                                                 *["fleetwatch.alert/v1"] * 3]

        fault = Fault("rack r7", open=lambda: None, close=lambda: None,
                      expected=frozenset(map(subject_of, members)), allowed=frozenset({subject_of(other)}))
        row = score_row("incident", fault, None, store=store, receiver=hook, since=0, since_ms=since_ms,
                        opened=opened, killed=None, failure=None)
        assert (row.expected, row.seen, row.false_positives, row.lost, row.duplicated) == (2, 2, [], [], 0)
        assert row.ok and row.alert_s is not None
    finally:
        notifier.close()
        store.close()
        hook.stop()


def _collector_silent(source: str, starts_at: int) -> dict:
    """A `collector.silent` object as the job writes it: its subject is the collector (`source`)."""
    alert = {**make_alert("collector.silent", cluster=None, starts_at=starts_at), "target": None, "source": source,
             "summary": f"collector {source} has sent no round"}
    return {**alert, "alert_id": alert_id("collector.silent", queue_subject_of(alert), starts_at)}


def test_a_removal_row_sees_only_alerts_the_removal_resolved_and_a_collector_is_a_subject(tmp_path):
    # Issue 41.4's rows: a target removed from the probes' config resolves its alerts with
    # `details.reason` "target removed: ..." (a row that removes one sees an alert only so resolved),
    # and a frozen or restarted probe raises `collector.silent`, whose subject is the collector
    # (`collector:<source>`): a row names it to expect or allow it.
    hook = Hook().start()
    config = FleetwatchConfig.model_validate({
        "alerting": {"receivers": [{"name": "ops", "type": "webhook", "url": hook.url(), "secret_env": "FW_SECRET"}]}})
    clock = FakeClock(time.time() + 5)
    store = Store(f"sqlite:///{tmp_path / 'fleet.db'}")
    notifier = Notifier(config, store, NotifyOptions(group_wait_ms=0), env={"FW_SECRET": SECRET}, clock=clock)
    try:
        since_ms, opened = now_ms(), time.monotonic()
        t0 = clock.ms - 60_000
        removed = make_alert("broker.heartbeat_lost", cluster="c0", broker=3, starts_at=t0)
        healed = make_alert("broker.fenced", cluster="c0", broker=3, starts_at=t0 + 100)
        silent = _collector_silent("probe-0", t0 + 200)
        store.record_alerts(map(Alert.from_dict, [removed, healed, silent]))
        notifier.run(once=True)
        reason = {"reason": "target removed: probe-1 no longer watches it"}
        store.record_alerts(map(Alert.from_dict, [{**resolved(removed, t0 + 9_000), "details": reason},
                                                  resolved(healed, t0 + 9_000), resolved(silent, t0 + 9_500)]))
        notifier.run(once=True)
        assert len(hook.got()) == 6

        fault = Fault("frozen broker", open=lambda: None, close=lambda: None,
                      expected=frozenset(map(subject_of, [removed, healed])),
                      allowed=frozenset({subject("collector.silent", source="probe-0")}))

        def score(fault: Fault, resolved_by: str | None) -> RowScore:
            return score_row("removal", fault, TARGET_REMOVED, store=store, receiver=hook, since=0,
                             since_ms=since_ms, opened=opened, killed=None, failure=None, resolved_by=resolved_by)

        by_removal = score(fault, TARGET_REMOVED)
        assert (by_removal.expected, by_removal.seen, by_removal.false_positives) == (2, 1, [])
        assert not by_removal.ok  # broker.fenced resolved, but not by the removal
        assert score(fault, None).seen == 2
        unexplained = score(Fault("frozen broker", lambda: None, lambda: None, fault.expected), TARGET_REMOVED)
        assert unexplained.false_positives == ["collector.silent collector:probe-0"]
    finally:
        notifier.close()
        store.close()
        hook.stop()
