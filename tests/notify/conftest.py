"""Fixtures of the notifier tests: a scripted HTTP receiver, and the notifier's store on both
databases (a SQLite file, a fresh database on a real PostgreSQL of this folder's modules)."""

from __future__ import annotations

import pytest
from support.notify import Hook
from support.postgres import PostgresServer, pg_binaries


@pytest.fixture(scope="module")
def postgres_server():
    bin_dir = pg_binaries()
    if bin_dir is None:
        pytest.skip("PostgreSQL binaries (initdb, pg_ctl) not installed: apt-get install postgresql")
    server = PostgresServer(bin_dir).start()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    """The notifier over both stores: a SQLite file and a fresh database on a real PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'fleet.db'}"
    return request.getfixturevalue("postgres_server").create_database("notify")


@pytest.fixture
def hook():
    h = Hook()
    yield h
    h.stop()

