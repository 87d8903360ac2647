"""Shared fixtures: one real local Spark session for the whole run (JVM start-up is slow), one real
PostgreSQL server for the whole run, and a healthy real Kafka cluster watched from the start of the
run when it holds a test that uses it."""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from support.costs import cost_hook

from streaming.workshop.postgres import PostgresServer, pg_binaries

# Dash's test server (dash_duo) is stopped by raising SystemExit in every thread started after it
# (dash.testing's KillerThread): a request thread inside werkzeug's line-per-request log then can
# leave a logging handler's lock held for good, and the next line logged anywhere in the session
# waits forever (seen: lane B stuck in the server's own "Server stopped", a clean-clone run lost).
# Request threads that log nothing hold no such lock.
logging.getLogger("werkzeug").setLevel(logging.ERROR)

pytest_runtest_protocol = cost_hook  # each test's wall and CPU time, when tests/lanes.py asks


def pytest_collection_modifyitems(items):
    """Marks `postgres` every test that uses the real PostgreSQL server, directly or through a
    `postgresql` parameter of a store fixture, and `spark` every test that uses the session's Spark,
    so the fast lane (`make check`) can leave them out."""
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "postgres" in item.fixturenames or "postgresql" in params.values():
            item.add_marker(pytest.mark.postgres)
        if "spark" in item.fixturenames:
            item.add_marker(pytest.mark.spark)


def pytest_collection_finish(session: pytest.Session) -> None:
    _start_healthy_watch(session.config, session.items)


@pytest.fixture(scope="session")
def test_config():
    from streaming.config import FleetwatchConfig

    return FleetwatchConfig.model_validate({"spark": {"master": "local[2]", "shuffle_partitions": 2}})


@pytest.fixture(scope="session")
def spark(test_config):
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from streaming.job import spark_session

    session = spark_session(test_config, "fleetwatch-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def postgres():
    """A PostgreSQL server on 127.0.0.1 for the session (streaming/workshop/postgres.py); every test
    that wants a fresh database asks it for one. `make test` installs PostgreSQL: without its
    binaries the tests that need it fail, saying so."""
    bin_dir = pg_binaries()
    if bin_dir is None:
        pytest.fail("PostgreSQL binaries (initdb, pg_ctl) not installed: apt-get install postgresql")
    server = PostgresServer(bin_dir).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def kafka_node(tmp_path_factory):
    """One real Kafka 4.4 node for the session's tests that read a real bus (started by the first).
    Tests share it as jobs share a production bus, never at once: `kafka_bus` empties it first."""
    from support.live_fleet import real_kafka_bus

    with real_kafka_bus(tmp_path_factory.mktemp("kafka-bus")) as bootstrap:
        yield bootstrap


@pytest.fixture
def kafka_bus(kafka_node):
    """The session's real Kafka node with none of the earlier tests' topics or records: the
    telemetry topics created again, empty (support/live_fleet.py `empty_topics`)."""
    from support.live_fleet import empty_topics

    empty_topics(kafka_node)
    return kafka_node


_HEALTHY = pytest.StashKey[object]()
_HEALTHY_ROOT = pytest.StashKey[Path]()


def _start_healthy_watch(config: pytest.Config, items: list[pytest.Item]) -> None:
    """tests/support/healthy_kafka.py: started once the tests are collected, before the first one
    runs, when a selected test uses it, so that its five minutes of watching pass while the other
    tests run (in this pytest process only: `make test` runs lanes, see tests/lanes.py)."""
    if not config.option.collectonly and any("healthy_real_kafka" in item.fixturenames for item in items):
        from support.healthy_kafka import HealthyWatch

        config.stash[_HEALTHY_ROOT] = root = Path(tempfile.mkdtemp(prefix="fleetwatch-healthy-kafka-"))
        config.stash[_HEALTHY] = HealthyWatch(root).start()


def pytest_sessionfinish(session: pytest.Session) -> None:
    watch = session.config.stash.get(_HEALTHY, None)
    if watch is not None:
        watch.stop()  # type: ignore[attr-defined]
        shutil.rmtree(session.config.stash[_HEALTHY_ROOT], ignore_errors=True)


@pytest.fixture(scope="session")
def healthy_real_kafka(request):
    """The healthy real cluster, watched since the start of the session (see `_start_healthy_watch`)."""
    watch = request.config.stash.get(_HEALTHY, None)
    if watch is None:
        pytest.fail("the healthy real cluster was not started: its users are found at collection")
    return watch
