"""Shared fixtures: one real local Spark session for the whole run (JVM start-up is slow)."""

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
    from streaming.job import spark_session

    session = spark_session(test_config, "fleetwatch-tests")
    yield session
    session.stop()
