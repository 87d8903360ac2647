"""The store tests run on both databases the store supports: a SQLite file and a fresh database on
the session's real PostgreSQL (the `postgres` fixture of tests/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    return request.getfixturevalue("postgres").create_database()
