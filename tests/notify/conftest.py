"""Fixtures of the notifier tests: a scripted HTTP receiver, and the notifier's store on both
databases (a SQLite file, a fresh database on the session's real PostgreSQL)."""

from __future__ import annotations

import pytest

from streaming.workshop.hooks import Hook


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    """The notifier over both stores: a SQLite file and a fresh database on a real PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'fleet.db'}"
    # The session's server (tests/conftest.py); the database is named after the test module.
    return request.getfixturevalue("postgres").create_database(request.module.__name__.removeprefix("test_"))


@pytest.fixture
def hook():
    h = Hook()
    yield h
    h.stop()

