"""Shared fixtures: one real local Spark session for the whole run (JVM start-up is slow), one real
PostgreSQL server for the whole run, and a healthy real Kafka cluster watched for the whole run when
it holds a `real_kafka` test."""

from __future__ import annotations

import os
import sys

import pytest
from support.postgres import PostgresServer, pg_binaries


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


@pytest.fixture(scope="session")
def test_config():
    from streaming.config import FleetwatchConfig

    return FleetwatchConfig.model_validate({"spark": {"master": "local[2]", "shuffle_partitions": 2}})


@pytest.fixture(scope="session")
def spark(test_config):
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from streaming.pipeline.session import spark_session

    session = spark_session(test_config, "fleetwatch-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def postgres():
    """A PostgreSQL server on 127.0.0.1 for the session (tests/support/postgres.py); every test
    that wants a fresh database asks it for one. `make test` installs PostgreSQL: without its
    binaries the tests that need it fail, saying so."""
    bin_dir = pg_binaries()
    if bin_dir is None:
        pytest.fail("PostgreSQL binaries (initdb, pg_ctl) not installed: apt-get install postgresql")
    server = PostgresServer(bin_dir).start()
    yield server
    server.stop()


@pytest.fixture(scope="session", autouse=True)
def healthy_real_kafka(request, tmp_path_factory):
    """tests/support/healthy_kafka.py: started before the first test, so that its five minutes of
    watching pass while the other tests run; None when no `real_kafka` test was selected."""
    if not any(item.get_closest_marker("real_kafka") for item in request.session.items):
        yield None
        return
    from support.healthy_kafka import HealthyWatch

    watch = HealthyWatch(tmp_path_factory.mktemp("healthy-kafka")).start()
    try:
        yield watch
    finally:
        watch.stop()
