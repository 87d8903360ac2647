"""Delivery policies (issue 19) on real parts: a real HTTP receiver on 127.0.0.1, a real SQLite
store (and a real PostgreSQL where the store decides), the real `Notifier` driven pass by pass
with a clock under the test's control.

- a silence ending (or expired by hand) re-checks what it held (deploy/README.md, "Silences");
- a resolution goes wherever its firing went ("Routing");
- dead letters after a limit, unblocking the subject; `--requeue-dead` keeps order;
- `Retry-After` of any shape: no hot loop (its parsing is in test_notify_policy_config.py);
- retention: finished notifications of resolved alerts and ended silences older than
  `alerting.delivery.retention_days` go, in bounded batches; recent, undelivered and open stay.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import func, inspect, select, text, update

from streaming.config import FleetwatchConfig
from streaming.notify.delivery import Notifier, NotifyOptions
from streaming.records.alert import Alert
from streaming.store import Store, add_silence, expire_silence, list_silences, outbox
from streaming.workshop.fake_clock import FakeClock
from streaming.workshop.hooks import Hook, delivery_rows, make_alert, outbox_rows, resolved

WEBHOOK_SECRET = "whsec-policies-5b1e"


@pytest.fixture
def hook():
    h = Hook().start()
    yield h
    h.stop()


def make_notifier(store_url: str, receivers: list[dict], clock: FakeClock, *, routes: list[dict] | None = None,
                  delivery: dict | None = None, clusters: list[dict] | None = None, **options) -> Notifier:
    config = FleetwatchConfig.model_validate({
        "clusters": clusters or [],
        "alerting": {"receivers": receivers, "routes": routes or [], **({"delivery": delivery} if delivery else {})}})
    options = {"group_wait_ms": 0, "retry_base_ms": 100, "retry_max_ms": 1000, **options}
    env = {"FW_SECRET": WEBHOOK_SECRET, "FW_PD_KEY": "pd-key-policies-0001"}
    return Notifier(config, Store(store_url), NotifyOptions(**options), env=env, clock=clock)


def record_at(store: Store, alerts: list[dict[str, Any]], at_ms: int) -> None:
    """Record alerts the way the job does, as if at `at_ms` (the outbox rows' created_at)."""
    store.record_alerts(map(Alert.from_dict, alerts))
    with store.engine.begin() as conn:
        for alert in alerts:
            conn.execute(update(outbox).where(outbox.c.alert_id == alert["alert_id"],
                                              outbox.c.status == alert["status"]).values(created_at=at_ms))


def got(hook: Hook, path: str = "/hook") -> list[tuple[str, str]]:
    out = []
    for arrival in hook.got(path):
        body = json.loads(arrival["body"])
        if "event_action" in body:  # PagerDuty Events v2
            out.append((body["dedup_key"], "firing" if body["event_action"] == "trigger" else "resolved"))
        else:
            out.append((body["alert_id"], body["status"]))
    return out


def key(alert: dict[str, Any], status: str = "firing") -> tuple[str, str]:
    return alert["alert_id"], status


WEBHOOK = {"name": "ops", "type": "webhook", "secret_env": "FW_SECRET"}


# -- 1. silences end ---------------------------------------------------------------------------

def test_alert_held_by_a_silence_is_paged_when_the_silence_ends_unless_it_resolved(store_url, hook):
    clock = FakeClock()
    notifier = make_notifier(store_url, [{**WEBHOOK, "url": hook.url()}], clock)
    store = notifier.store
    t = clock.ms
    silence = add_silence(store, cluster="c1", duration_ms=3_600_000, reason="rolling restart", starts_at=t - 1000)
    still = make_alert("broker.fenced", cluster="c1", broker=1, starts_at=t - 500)
    brief = make_alert("broker.heartbeat_lost", cluster="c1", broker=2, starts_at=t - 400)
    other = make_alert("broker.fenced", cluster="c2", broker=1, starts_at=t - 300)
    record_at(store, [still, brief, other], t)
    notifier.run(once=True)
    assert got(hook) == [key(other)]
    # brief resolves within the silence
    clock.advance(60)
    record_at(store, [resolved(brief, clock.ms)], clock.ms)
    notifier.run(once=True)
    assert got(hook) == [key(other)]
    assert all(r["delivered_at"] is not None for r in outbox_rows(store)), "held notifications are not stuck"
    # the silence ends: what still fires is paged now, what resolved meanwhile is never sent
    clock.set_ms(silence.ends_at + 1000)
    notifier.run(once=True)
    assert got(hook) == [key(other), key(still)]
    notifier.run(once=True)
    assert got(hook) == [key(other), key(still)], "sent once"
    record_at(store, [resolved(still, clock.ms)], clock.ms)
    notifier.run(once=True)
    assert got(hook) == [key(other), key(still), key(still, "resolved")]
    assert all(r["delivered_at"] is not None for r in outbox_rows(store))
    states = {(r["alert_id"], r["status"]): r["state"] for r in delivery_rows(store)}
    assert states[key(brief)] == states[key(brief, "resolved")] == "silenced"
    notifier.close()
    store.close()


def test_expiring_a_silence_by_hand_and_a_resolution_after_its_end(store_url, hook):
    clock = FakeClock()
    notifier = make_notifier(store_url, [{**WEBHOOK, "url": hook.url()}], clock)
    store = notifier.store
    t = clock.ms
    by_hand = add_silence(store, cluster="c3", duration_ms=3_600_000, reason="maintenance", starts_at=t - 60_000)
    held = make_alert("cluster.no_controller", cluster="c3", starts_at=t - 500)
    record_at(store, [held], t - 1000)
    notifier.run(once=True)
    assert got(hook) == []
    ended = expire_silence(store, by_hand.id)  # ends it now, on the wall clock (which ran on meanwhile)
    clock.set_ms(max(clock.ms, ended.ends_at) + 1)
    notifier.run(once=True)
    assert got(hook) == [key(held)]

    # Held by a 10-minute silence; resolved only after the silence ended, while no notifier ran:
    # it was firing when the silence ended, so its firing and then its resolution go out.
    short = add_silence(store, cluster="c4", duration_ms=600_000, reason="restart", starts_at=clock.ms - 1000)
    late = make_alert("broker.fenced", cluster="c4", broker=7, starts_at=clock.ms - 500)
    record_at(store, [late], clock.ms)
    notifier.run(once=True)
    assert got(hook) == [key(held)]
    record_at(store, [resolved(late, short.ends_at + 5000)], short.ends_at + 5000)
    clock.set_ms(short.ends_at + 10_000)
    notifier.run(once=True)
    notifier.run(once=True)
    assert got(hook) == [key(held), key(late), key(late, "resolved")]
    notifier.close()
    store.close()


# -- 2. resolutions follow their firing --------------------------------------------------------

def test_resolution_goes_wherever_its_firing_went(store_url, hook):
    clock = FakeClock()
    receivers = [{"name": "pager", "type": "pagerduty", "url": hook.url("/v2/enqueue"), "routing_key_env": "FW_PD_KEY"},
                 {**WEBHOOK, "url": hook.url("/hook")},
                 {"name": "audit", "type": "webhook", "url": hook.url("/audit")}]
    routes = [{"receiver": "pager", "match": {"status": ["firing"], "severity": ["critical"]}},
              {"receiver": "audit", "match": {"status": ["resolved"]}},
              {"receiver": "ops"}]
    notifier = make_notifier(store_url, receivers, clock, routes=routes)
    store = notifier.store
    t = clock.ms
    crit = make_alert("broker.heartbeat_lost", cluster="c1", broker=1, starts_at=t - 60_000)
    warn = make_alert("broker.fenced", cluster="c1", broker=2, starts_at=t - 50_000)
    quick = make_alert("cluster.no_controller", cluster="c2", starts_at=t - 40_000)
    record_at(store, [crit, warn], t)
    notifier.run(once=True)
    assert got(hook, "/v2/enqueue") == [key(crit)]
    record_at(store, [resolved(crit, t + 1000), resolved(warn, t + 1000)], t + 1000)
    # a critical alert that fires and resolves within one batch: both planned in one pass
    record_at(store, [quick, resolved(quick, t + 2000)], t + 2000)
    clock.advance(5)
    notifier.run(once=True)
    paged = got(hook, "/v2/enqueue")
    assert sorted(paged) == sorted([key(crit), key(crit, "resolved"), key(quick), key(quick, "resolved")])
    assert paged.index(key(quick)) < paged.index(key(quick, "resolved"))
    assert sorted(got(hook, "/hook")) == sorted([key(crit), key(warn), key(crit, "resolved"), key(warn, "resolved"),
                                                 key(quick), key(quick, "resolved")])
    # the resolved-only route still gets resolutions only
    assert sorted(got(hook, "/audit")) == sorted([key(crit, "resolved"), key(warn, "resolved"),
                                                  key(quick, "resolved")])
    notifier.close()
    store.close()


# -- 4. dead letters ---------------------------------------------------------------------------

def _drive(notifier: Notifier, clock: FakeClock, until, *, step_s: float = 2.0, passes: int = 200) -> None:
    for _ in range(passes):
        if until():
            return
        notifier.run(once=True)
        clock.advance(step_s)
    raise AssertionError("the notifier did not get there")


def test_a_delivery_refused_forever_becomes_dead_and_stops_blocking_its_subject(store_url, hook):
    clock = FakeClock()
    notifier = make_notifier(store_url, [{**WEBHOOK, "url": hook.url()}], clock,
                             delivery={"dead_letter_attempts": 6, "dead_letter_age_ms": 3_600_000})
    store = notifier.store
    t = clock.ms
    poison = make_alert("broker.fenced", cluster="c1", broker=1, starts_at=t - 60_000)
    hook.decide = lambda path, body: (("status", 500, "internal error")
                                      if json.loads(body)["alert_id"] == poison["alert_id"]
                                      and json.loads(body)["status"] == "firing" else None)
    record_at(store, [poison], t)
    notifier.run(once=True)
    record_at(store, [resolved(poison, t + 1000)], t + 1000)
    following = make_alert("broker.fenced", cluster="c1", broker=1, starts_at=t + 2000)
    record_at(store, [following], t + 2000)

    # the receiver keeps failing the poison and pauses; another subject's new alert is not held back
    for _ in range(3):
        clock.advance(1.5)
        notifier.run(once=True)
    elsewhere = make_alert("cluster.no_controller", cluster="c2", starts_at=clock.ms - 100)
    record_at(store, [elsewhere], clock.ms)
    notifier.run(once=True)
    assert got(hook) == [key(elsewhere)]

    def dead():
        return any(r["state"] == "dead" for r in delivery_rows(store))

    _drive(notifier, clock, dead)
    notifier.run(once=True)
    row = next(r for r in delivery_rows(store) if (r["alert_id"], r["status"]) == key(poison))
    assert row["state"] == "dead" and row["dead_letter"] and row["attempts"] == 6
    assert "gave up after 6 attempts" in row["last_error"] and "HTTP 500" in row["last_error"]
    # the subject's later notifications are no longer blocked, and keep their order
    assert got(hook) == [key(elsewhere), key(poison, "resolved"), key(following)]
    notifier.close()
    store.close()


def test_a_delivery_failing_for_longer_than_the_age_limit_becomes_dead(tmp_path, hook):
    clock = FakeClock()
    notifier = make_notifier(f"sqlite:///{tmp_path / 'age.db'}", [{**WEBHOOK, "url": hook.url()}], clock,
                             delivery={"dead_letter_attempts": 1000, "dead_letter_age_ms": 600_000},
                             retry_max_ms=60_000)
    store = notifier.store
    hook.default = ("status", 503, "unavailable")
    alert = make_alert("cluster.unreachable", cluster=None, target="pay", starts_at=clock.ms - 1000)
    record_at(store, [alert], clock.ms)
    _drive(notifier, clock, lambda: any(r["state"] == "dead" for r in delivery_rows(store)), step_s=30)
    (row,) = delivery_rows(store)
    assert row["last_attempt_at"] - row["created_at"] >= 600_000
    assert row["last_attempt_at"] - row["created_at"] < 600_000 + 61_000, "not long after the limit"
    assert "gave up after 10 min" in row["last_error"] and "HTTP 503" in row["last_error"]
    notifier.close()
    store.close()


def test_requeue_dead_keeps_order_and_never_sends_a_firing_after_its_resolution(store_url, hook):
    clock = FakeClock()
    notifier = make_notifier(store_url, [{**WEBHOOK, "url": hook.url()}], clock)
    store = notifier.store
    t = clock.ms
    gone = make_alert("broker.fenced", cluster="c1", broker=1, starts_at=t - 9000)    # resolution went
    both = make_alert("broker.fenced", cluster="c1", broker=2, starts_at=t - 8000)    # both dead
    waiting = make_alert("broker.fenced", cluster="c1", broker=3, starts_at=t - 7000)  # resolution retrying
    refuse = {key(gone): 400, key(both): 400, key(both, "resolved"): 400, key(waiting): 400,
              key(waiting, "resolved"): 503}

    def decide(path, body):
        alert = json.loads(body)
        code = refuse.get((alert["alert_id"], alert["status"]))
        return ("status", code, "refused") if code else None

    hook.decide = decide
    record_at(store, [gone, both, waiting], t)
    record_at(store, [resolved(a, t + 1000) for a in (gone, both, waiting)], t + 1000)
    clock.advance(2)
    notifier.run(once=True)
    assert got(hook) == [key(gone, "resolved")]
    states = {(r["alert_id"], r["status"]): r["state"] for r in delivery_rows(store)}
    assert states[key(waiting, "resolved")] == "pending" and states[key(both, "resolved")] == "dead"

    refuse.clear()  # the receiver is fixed
    notifier.run(once=True, requeue_dead=True)
    _drive(notifier, clock, lambda: all(r["delivered_at"] for r in outbox_rows(store)))
    sent = got(hook)
    assert key(gone) not in sent, "a firing is never sent after its own resolution"
    assert sent.index(key(both)) < sent.index(key(both, "resolved"))
    assert sent.index(key(waiting)) < sent.index(key(waiting, "resolved"))
    assert len(sent) == len(set(sent)) == 5
    row = next(r for r in delivery_rows(store) if (r["alert_id"], r["status"]) == key(gone))
    assert row["state"] == "superseded" and "resolution was already delivered" in row["last_error"]
    notifier.close()
    store.close()


# -- 5. Retry-After ----------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["inf", "nan", "-30", "1e400", "Fri, 31 Dec 9999 23:59:59 GMT", "garbage",
                                   "ØØ", "0"])
def test_any_retry_after_is_survived_without_a_hot_loop(tmp_path, hook, value):
    clock = FakeClock()
    notifier = make_notifier(f"sqlite:///{tmp_path / 'ra.db'}", [{**WEBHOOK, "url": hook.url()}], clock,
                             retry_base_ms=1000, retry_max_ms=30_000)
    store = notifier.store
    hook.default = ("status", 503, "busy", {"Retry-After": value})
    record_at(store, [make_alert("broker.fenced", cluster="c1", broker=1, starts_at=clock.ms - 1000)], clock.ms)
    for _ in range(5):
        notifier.run(once=True)  # the clock does not move: nothing is due again
    assert len(hook.refused) == 1
    (row,) = delivery_rows(store)
    assert row["attempts"] == 1 and clock.ms + 500 <= row["next_attempt_at"] <= clock.ms + 30_000
    assert notifier.stats["errors"] == 0
    clock.advance(31)
    notifier.run(once=True)
    assert len(hook.refused) == 2
    notifier.close()
    store.close()


# -- 8. retention -----------------------------------------------------------------------------

DAY_MS = 86_400_000


def _count(store: Store, table) -> int:
    with store.engine.connect() as conn:
        return conn.scalar(select(func.count()).select_from(table))


def test_old_finished_rows_go_in_bounded_batches_recent_and_open_ones_stay(store_url, hook):
    clock = FakeClock()
    notifier = make_notifier(store_url, [{"name": "ops", "type": "webhook", "url": hook.url()}], clock,
                             delivery={"retention_days": 14, "dead_letter_age_ms": 60 * DAY_MS},
                             retention_batch_alerts=1, retention_batches=1)
    store = notifier.store
    t0 = clock.ms
    closed = [make_alert("broker.fenced", cluster="c1", broker=b, starts_at=t0 - 9000 + b) for b in range(3)]
    still_open = make_alert("broker.heartbeat_lost", cluster="c1", broker=9, starts_at=t0 - 8000)
    refused = make_alert("cluster.no_controller", cluster="c2", starts_at=t0 - 7000)
    stuck = make_alert("cluster.no_controller", cluster="c3", starts_at=t0 - 6000)

    def decide(path, body):
        alert = json.loads(body)
        if alert["alert_id"] == refused["alert_id"]:
            return ("status", 400, "bad request")   # dead letters
        if alert["alert_id"] == stuck["alert_id"]:
            return ("status", 503, "unavailable")   # never delivered: stays
        return None

    hook.decide = decide
    record_at(store, [*closed, still_open, refused, stuck], t0)
    record_at(store, [resolved(a, t0 + 1000) for a in (*closed, refused)], t0 + 1000)
    ended_long_ago = add_silence(store, cluster="old", duration_ms=3_600_000, reason="old work",
                                 starts_at=t0 - 2 * DAY_MS)
    for _ in range(3):
        notifier.run(once=True)
        clock.advance(2)
    assert {r["state"] for r in delivery_rows(store) if r["alert_id"] == refused["alert_id"]} == {"dead"}

    # 15 days later: recent work and silences
    clock.advance(15 * 86_400)
    t1 = clock.ms
    recent = make_alert("broker.fenced", cluster="c4", broker=1, starts_at=t1 - 5000)
    record_at(store, [recent], t1)
    record_at(store, [resolved(recent, t1 + 100)], t1 + 100)
    ended_recently = add_silence(store, cluster="new", duration_ms=3_600_000, reason="recent work",
                                 starts_at=t1 - DAY_MS)
    active = add_silence(store, cluster="now", duration_ms=3_600_000, reason="current work", starts_at=t1 - 1000)

    old_rows = 2 * len(closed) + 2  # the closed alerts' and the dead-lettered alert's firing and resolved rows
    before = _count(store, outbox)
    notifier.run(once=True)
    # one bounded batch per pass: one alert, its two outbox rows and their deliveries
    assert before - _count(store, outbox) == 2
    for _ in range(10):
        clock.advance(notifier.options.retention_interval_ms / 1000)
        notifier.run(once=True)
    assert before - _count(store, outbox) == old_rows
    kept = {(r["alert_id"], r["status"]) for r in outbox_rows(store)}
    assert kept == {key(still_open), key(stuck), key(recent), key(recent, "resolved")}
    assert {(r["alert_id"], r["status"]) for r in delivery_rows(store)} == kept, "deliveries go with their rows"
    assert {s.id for s in list_silences(store, include_ended=True)} == {ended_recently.id, active.id}
    assert ended_long_ago.id not in {s.id for s in list_silences(store, include_ended=True)}
    # what stays keeps working: the open alert's resolution still follows its firing
    record_at(store, [resolved(still_open, clock.ms)], clock.ms)
    clock.advance(2)
    notifier.run(once=True)
    assert (still_open["alert_id"], "resolved") in {(json.loads(a["body"])["alert_id"], json.loads(a["body"])["status"])
                                                   for a in hook.got()}
    notifier.close()
    store.close()


def test_the_indexes_the_notifier_scans_exist_also_on_an_older_store(store_url):
    store = Store(store_url)
    with store.engine.begin() as conn:  # a store created before these indexes existed
        for name in ("ix_outbox_delivered_at", "ix_silences_ends_at"):
            conn.execute(text(f"DROP INDEX IF EXISTS {name}"))
    store.close()
    store = Store(store_url)
    found = {(t, i["name"]) for t in ("outbox", "silences")
             for i in inspect(store.engine).get_indexes(t)}
    assert {("outbox", "ix_outbox_delivered_at"), ("silences", "ix_silences_ends_at")} <= found
    if store.engine.dialect.name == "sqlite":
        # plan() finds the rows to plan through the index, not a scan of the whole outbox
        with store.engine.connect() as conn:
            plan = " ".join(str(r[-1]) for r in conn.execute(text(
                "EXPLAIN QUERY PLAN SELECT id FROM outbox WHERE delivered_at IS NULL ORDER BY id LIMIT 100")))
        assert "ix_outbox_delivered_at" in plan, plan
    store.close()
