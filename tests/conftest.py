"""Shared fixtures: one real local Spark session for the whole run (JVM start-up is slow), and a
healthy real Kafka cluster watched for the whole run when it holds a `real_kafka` test."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1].parent / "shared" / "examples"


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
