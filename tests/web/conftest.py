"""Fixtures of the dashboard tests: the stores of tests/support/dashboard_fleet.py, built once per
module, and an engine on the first."""

from __future__ import annotations

import pytest
from support.dashboard_fleet import fill_fleet, fill_identity_fleet

from streaming.store import Store


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('dashboard') / 'store.db'}"
    store = Store(url)
    fill_fleet(store)
    store.close()
    return url


@pytest.fixture(scope="module")
def identity_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('identity') / 'store.db'}"
    store = Store(url)
    fill_identity_fleet(store)
    store.close()
    return url


@pytest.fixture
def engine(store_url: str):
    store = Store(store_url)
    yield store.engine
    store.close()
