"""The store tests run on both databases the store supports: a SQLite file and a fresh database on
the session's real PostgreSQL (the `postgres` fixture of tests/conftest.py)."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest


@pytest.fixture(params=["sqlite", "postgresql"])
def database_urls(request, tmp_path) -> Callable[[], str]:
    """A maker of URLs of fresh databases, each of its own, on the test's database."""
    made = itertools.count()

    def make() -> str:
        n = next(made)
        if request.param == "sqlite":
            return f"sqlite:///{tmp_path / ('store.db' if n == 0 else f'store-{n}.db')}"
        return request.getfixturevalue("postgres").create_database()

    return make


@pytest.fixture
def store_url(database_urls: Callable[[], str]) -> str:
    return database_urls()
