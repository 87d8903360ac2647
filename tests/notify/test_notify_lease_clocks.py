"""Two notifiers whose clocks differ by 20 s (issue 27.2): never two senders at once, and the
standby takes over a killed sender within the lease's bound, whichever of them is ahead.

Real parts: PostgreSQL (the session's server), two `python -m streaming.notify` processes, one of
them on a host of its own (a UTS namespace with another host name, so the lease judges it as
another machine: no pid check, expiry only) whose wall clock libfaketime moves 20 s ahead, and a
real HTTP receiver on 127.0.0.1 that counts what it gets per (alert_id, status). Needs root
(unshare) and libfaketime (`make test` installs `faketime`). Every wait is a poll with a deadline.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from sqlalchemy import select, text

from streaming.records.alert import Alert
from streaming.store import Store, notifier_lease
from streaming.workshop.hooks import NotifierProcess, env_with, make_alert, outbox_rows, write_config
from streaming.workshop.polling import poll

LIBFAKETIME = next(iter(sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))), None)
SKEW = "+20s"
LEASE_S = 12  # alerting.delivery.lease_ms: shorter than the skew, which the database's clock makes harmless
SLACK_S = 3  # the standby's poll (0.5 s) and a loaded machine's latency


def _ahead_on_another_host(name: str) -> tuple[tuple[str, ...], dict[str, str]]:
    """A prefix running the notifier in a UTS namespace named `name`, and env moving its wall clock
    (only: the monotonic clock is left alone) by SKEW."""
    if shutil.which("unshare") is None or LIBFAKETIME is None:
        pytest.fail("needs unshare and libfaketime (apt-get install faketime; make test installs it)")
    prefix = ("unshare", "--uts", "sh", "-c", f'hostname {name} && exec "$@"', "sh")
    return prefix, {"LD_PRELOAD": str(LIBFAKETIME), "FAKETIME": SKEW, "FAKETIME_DONT_FAKE_MONOTONIC": "1"}


def _lease(store: Store) -> dict | None:
    with store.engine.connect() as conn:
        row = conn.execute(select(notifier_lease)).first()
    return None if row is None else dict(row._mapping)


def _lease_left_s(store: Store) -> float:
    """How long the lease row says it is valid, on the database's clock (PostgreSQL's: the host's)."""
    with store.engine.connect() as conn:
        db_now = conn.scalar(text("SELECT CAST(FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000) AS BIGINT)"))
        return (conn.scalar(select(notifier_lease.c.expires_at)) - db_now) / 1000


def test_skewed_clocks_never_make_two_senders_and_takeover_is_bounded(tmp_path, hook, postgres):
    hook.default = ("slow", 0.05)  # requests in flight all the time
    hook.start()
    url = postgres.create_database("lease_clocks")
    config = write_config(tmp_path, [{"name": "ops", "type": "webhook", "url": hook.url()}], store_url=url,
                          delivery={"lease_ms": LEASE_S * 1000, "attempt_timeout_ms": 4000})
    store = Store(url)
    prefix, skewed = _ahead_on_another_host("fleetwatch-node-b")
    opts = ("--group-wait-ms", "0", "--retry-base-ms", "200", "--retry-max-ms", "1000")
    start = int(time.time() * 1000) - 100_000
    alerts = [make_alert("broker.fenced", cluster=f"c{i % 7}", broker=i, starts_at=start + i) for i in range(200)]
    recorded = 0

    def record(n: int) -> None:
        nonlocal recorded
        store.record_alerts(map(Alert.from_dict, alerts[recorded:recorded + n]))
        recorded += n

    def delivered() -> bool:
        rows = outbox_rows(store)
        return len(rows) == recorded and all(r["delivered_at"] for r in rows)

    a = NotifierProcess(config, tmp_path / "a.log", env_with(), *opts)
    b = a2 = None
    try:
        poll(lambda: "notifier started" in a.log(), 30, "notifier A (the real clock) to hold the lease",
             interval_s=0.05)
        b = NotifierProcess(config, tmp_path / "b.log", env_with(**skewed), *opts, prefix=prefix)
        poll(lambda: "another notifier holds the lease" in b.log(), 30, "notifier B (20 s ahead) to wait",
             interval_s=0.05)
        # 1. A sends through two renewals while B, 20 s ahead, watches its lease.
        until = time.monotonic() + 2.2 * LEASE_S / 3
        while time.monotonic() < until:
            record(2)
            time.sleep(0.4)  # the pace of the alerts, not a synchronisation
        poll(delivered, 60, "the first alerts delivered", interval_s=0.05)
        assert "notifier started" not in b.log() and "took over" not in b.log(), "B sent while A held the lease"
        assert _lease(store)["pid"] == a.proc.pid
        # 2. A is killed; B (20 s ahead) takes over once the lease expired on the database's clock.
        left_a = _lease_left_s(store)
        a.kill()
        killed = time.monotonic()
        record(10)
        poll(lambda: "notifier started" in b.log(), 90, "B to take over", interval_s=0.05)
        takeover_b = time.monotonic() - killed
        poll(delivered, 60, "the alerts recorded after A was killed", interval_s=0.05)
        # 3. A new A (the real clock, 20 s behind) waits; B is killed; A takes over.
        a2 = NotifierProcess(config, tmp_path / "a2.log", env_with(), *opts)
        poll(lambda: "another notifier holds the lease" in a2.log(), 30, "the new A to wait", interval_s=0.05)
        left_b = _lease_left_s(store)
        b.kill()
        killed = time.monotonic()
        record(10)
        poll(lambda: "notifier started" in a2.log(), 90, "the new A to take over", interval_s=0.05)
        takeover_a = time.monotonic() - killed
        poll(delivered, 60, "the alerts recorded after B was killed", interval_s=0.05)
    finally:
        for proc in (a, b, a2):
            if proc is not None and proc.proc.poll() is None:
                proc.stop()

    sent = [(json.loads(x["body"])["alert_id"], json.loads(x["body"])["status"]) for x in hook.got()]
    duplicates = {k: sent.count(k) for k in set(sent) if sent.count(k) > 1}
    print(f"takeover after kill -9: B (20 s ahead) {takeover_b:.1f} s of A's {left_a:.1f} s left, "
          f"A (20 s behind) {takeover_a:.1f} s of B's {left_b:.1f} s left; "
          f"{len(sent)} requests for {recorded} alerts, duplicates {duplicates}")
    assert sorted(set(sent)) == sorted((x["alert_id"], "firing") for x in alerts[:recorded])
    assert not duplicates, f"sent more than once: {duplicates}"
    for takeover, left in ((takeover_b, left_a), (takeover_a, left_b)):
        # Within the lease: never longer than the lease, whatever the holder's clock wrote ...
        assert takeover <= LEASE_S + SLACK_S, f"the standby took {takeover:.1f} s to take over"
        # ... and never before the lease ran out on the database's clock: a standby that takes over
        # sooner judged a lease still valid as expired, and would have sent beside a live holder.
        assert left - SLACK_S <= takeover <= left + SLACK_S, f"took over after {takeover:.1f} s, {left:.1f} s left"
    assert "took over the notifier lease" in b.log() and "took over the notifier lease" in a2.log()
    store.close()
