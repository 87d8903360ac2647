"""Which store errors the job waits out and which fail it (issue 27.3), on real databases.

Only a transient error (the server down, restarting or unreachable, a lock held) is retried
(`streaming.plumbing.resilience.retry_store`); a schema error, a read-only or full database file fails the
micro-batch at once with a one-line message instead of stalling the job forever.
"""

from __future__ import annotations

import logging
import sqlite3
import threading

import pytest
from sqlalchemy import create_engine, event, text
from sqlalchemy.exc import OperationalError
from support.micro_batch import MicroBatch

from streaming.plumbing.ports import free_port
from streaming.plumbing.resilience import StoreFailure, is_transient, retry_store
from streaming.records.job_output import Refused
from streaming.sinks.batch_writer import BatchWriter
from streaming.store import Store

PROMPT_S = 10.0  # a failing write takes milliseconds; retried, it would still be waiting after this


def _quarantined_event() -> MicroBatch:
    return MicroBatch([Refused("fleetwatch.metadata:0:7", "bad_json", None, "{", None).output()])


def _write_in_thread(writer: BatchWriter, stop: threading.Event) -> BaseException | None:
    """What the writer raised, or None; a writer still retrying after PROMPT_S is stopped and the
    test fails saying so."""
    outcome: list[BaseException | None] = []

    def write() -> None:
        try:
            writer(_quarantined_event(), 0)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    thread.join(PROMPT_S)
    if thread.is_alive():
        stop.set()
        thread.join(30)
        pytest.fail(f"the writer was still retrying after {PROMPT_S} s: {outcome}")
    return outcome[0]


def test_a_dropped_table_fails_the_batch_at_once_with_one_line(store_url, caplog):
    store = Store(store_url)
    try:
        with store.engine.begin() as conn:
            conn.execute(text("DROP TABLE quarantine"))
        stop = threading.Event()
        with caplog.at_level(logging.INFO, logger="streaming.plumbing.resilience"):
            raised = _write_in_thread(BatchWriter(store, stop=stop), stop)
        assert isinstance(raised, StoreFailure), repr(raised)
        message = str(raised)
        assert "\n" not in message and "quarantine" in message, message
        assert message.startswith("cannot write a micro-batch: "), message
        assert not [r for r in caplog.records if r.getMessage() == "store unavailable, retrying"]
        assert [r for r in caplog.records if r.getMessage() == "store error, not retried"]
    finally:
        store.close()


def test_a_read_only_sqlite_file_fails_at_once(tmp_path, monkeypatch):
    Store(f"sqlite:///{tmp_path / 'store.db'}").close()  # the schema exists; the file is then opened read-only
    read_only = f"sqlite:///file:{tmp_path / 'store.db'}?mode=ro&uri=true"
    monkeypatch.chdir(tmp_path)
    store = Store(read_only)
    assert not (tmp_path / "file:").exists()  # an SQLite URI is not a folder to make
    try:
        stop = threading.Event()
        raised = _write_in_thread(BatchWriter(store, stop=stop), stop)
        assert isinstance(raised, StoreFailure) and "readonly database" in str(raised), repr(raised)
    finally:
        store.close()


def _sqlite_error(tmp_path, setup, statement) -> OperationalError:
    engine = create_engine(f"sqlite:///{tmp_path / 'x.db'}", connect_args={"timeout": 0})
    if setup is not None:
        event.listen(engine, "connect", lambda dbapi, _record: dbapi.execute(setup))
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE IF NOT EXISTS t (v TEXT)"))
        with pytest.raises(OperationalError) as info:
            statement(engine)
        return info.value
    finally:
        engine.dispose()


def test_sqlite_errors_are_told_by_their_result_code(tmp_path):
    def fill(engine):
        with engine.begin() as conn:
            for _ in range(200):
                conn.execute(text("INSERT INTO t VALUES (:v)"), {"v": "x" * 4000})

    full = _sqlite_error(tmp_path, "PRAGMA max_page_count = 16", fill)
    assert full.orig.sqlite_errorname == "SQLITE_FULL" and not is_transient(full)

    holder = sqlite3.connect(tmp_path / "x.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        def write(engine):
            with engine.begin() as conn:
                conn.execute(text("INSERT INTO t VALUES ('y')"))

        locked = _sqlite_error(tmp_path, None, write)
    finally:
        holder.rollback()
        holder.close()
    assert locked.orig.sqlite_errorname == "SQLITE_BUSY" and is_transient(locked)

    missing = _sqlite_error(tmp_path, None, lambda engine: engine.connect().execute(text("SELECT nope FROM t")))
    assert "no such column" in str(missing) and not is_transient(missing)


def test_postgresql_errors_are_told_by_their_sqlstate(postgres):
    store = Store(postgres.create_database())
    try:
        with store.engine.connect() as conn, pytest.raises(OperationalError) as killed:
            pid = conn.scalar(text("SELECT pg_backend_pid()"))
            with store.engine.connect() as other:
                other.scalar(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            conn.execute(text("SELECT 1"))
        # 57P01 admin_shutdown: what a restarting server says to its clients
        assert is_transient(killed.value), killed.value
        with store.engine.connect() as conn, pytest.raises(Exception) as missing:
            conn.execute(text("SELECT nope FROM alerts"))
        assert getattr(missing.value.orig, "sqlstate", None) == "42703" and not is_transient(missing.value)
    finally:
        store.close()
    # Nothing listens: refused before any server answered, so no SQLSTATE; retried.
    refused = create_engine(f"postgresql+psycopg://fleetwatch@127.0.0.1:{free_port()}/fleetwatch")
    with pytest.raises(OperationalError) as info:
        refused.connect()
    refused.dispose()
    assert is_transient(info.value)


def test_retry_store_waits_out_a_transient_error_and_fails_others_at_once(tmp_path):
    holder = sqlite3.connect(tmp_path / "x.db", isolation_level=None)
    holder.execute("CREATE TABLE t (v TEXT)")
    holder.execute("BEGIN IMMEDIATE")
    engine = create_engine(f"sqlite:///{tmp_path / 'x.db'}", connect_args={"timeout": 0})
    attempts = []

    def write() -> None:
        attempts.append(1)
        if len(attempts) == 2:
            holder.rollback()  # the lock is released while the writer waits
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO t VALUES ('y')"))

    try:
        retry_store(write, what="write", stop=threading.Event())
        assert len(attempts) == 2
        stop = threading.Event()
        timer = threading.Timer(PROMPT_S, stop.set)  # retried, it would wait until stopped
        timer.start()
        with pytest.raises(StoreFailure, match=r"^cannot read: OperationalError: .*no such table: gone"):
            retry_store(lambda: engine.connect().execute(text("SELECT * FROM gone")), what="read", stop=stop)
        timer.cancel()
    finally:
        holder.close()
        engine.dispose()
