"""The notifier schedules on its own clock (issue 42, point 4): an outbox row's `created_at` is the
clock of the job's driver that recorded it, and a driver whose clock runs ahead must delay no page.

Real parts: the store (a SQLite file, and a database on the session's PostgreSQL), the notifier
(`Notifier.run`, its live loop, in a thread of the test) and a real HTTP receiver on 127.0.0.1. The
driver is this test's process recording the alert as the job's sink does (`Store.record_alerts`),
its clock (`streaming.plumbing.clock.now_ms`, which the store reads) moved 60 s ahead while it writes.
"""

from __future__ import annotations

import json
import threading
import time

from streaming.config import FleetwatchConfig
from streaming.notify.delivery import Notifier, NotifyOptions
from streaming.plumbing import clock
from streaming.records.alert import Alert
from streaming.store import Store
from streaming.workshop.hooks import delivery_rows, make_alert, outbox_rows
from streaming.workshop.polling import poll

DRIVER_AHEAD_MS = 60_000
PROMPTLY_S = 15.0  # the notifier polls every 50 ms; generous for a loaded machine, far under the skew


def test_an_alert_recorded_by_a_driver_whose_clock_is_60_s_ahead_is_delivered_at_once(store_url, hook, monkeypatch):
    """Before, its delivery was planned at `created_at` (+ 0 for a webhook) on the driver's clock and
    judged due on the notifier's: the page waited the 60 s of skew (the poll below timed out)."""
    hook.start()
    config = FleetwatchConfig.model_validate({"alerting": {"receivers": [
        {"name": "ops", "type": "webhook", "url": hook.url()}]}})
    store = Store(store_url)
    notifier = Notifier(config, store, NotifyOptions(interval_ms=50), env={})
    stop = threading.Event()
    thread = threading.Thread(target=notifier.run, args=(stop,), name="notifier", daemon=True)
    thread.start()
    real_now_ms = clock.now_ms
    try:
        poll(lambda: notifier.lease.held, 20, "the notifier to hold its lease", interval_s=0.02)
        alert = make_alert("broker.fenced", broker=3, starts_at=real_now_ms() - 30_000)
        with monkeypatch.context() as driver:
            driver.setattr(clock, "now_ms", lambda: real_now_ms() + DRIVER_AHEAD_MS)
            store.record_alerts([Alert.from_dict(alert)])
        recorded = time.monotonic()
        (row,) = outbox_rows(store)
        assert row["created_at"] > real_now_ms() + DRIVER_AHEAD_MS // 2  # recorded on the driver's clock
        arrivals = poll(lambda: hook.got(), PROMPTLY_S, "the page at the receiver", interval_s=0.02)
        took_s = time.monotonic() - recorded
    finally:
        stop.set()
        thread.join(20)
        notifier.close()
    print(f"\ndelivered {took_s:.2f} s after the driver recorded it")
    assert [json.loads(a["body"])["alert_id"] for a in arrivals] == [alert["alert_id"]]
    (delivery,) = delivery_rows(store)
    assert delivery["state"] == "delivered"
    # Scheduled on the notifier's clock: no later than when it planned, not at the driver's time.
    assert delivery["next_attempt_at"] <= delivery["created_at"] < row["created_at"]
    store.close()
