"""WSGI entry point: `FLEETWATCH_STORE_URL=... gunicorn -w 2 dashboard.wsgi:server`.

FLEETWATCH_CONFIG (optional) names the config file: its clusters' tags become the overview's
filters, and its store.url the store when FLEETWATCH_STORE_URL is not set.

Served this way the dashboard never lets anyone silence without credentials (dashboard.auth): a
loopback bind is what a same-host proxy forwards every remote user to. Set the silencer credential.
"""

from __future__ import annotations

import os

from dashboard import create_app
from streaming.config import load_config

__all__ = ["server"]

_config_path = os.environ.get("FLEETWATCH_CONFIG")
_config = load_config(_config_path) if _config_path else None
_store_url = os.environ.get("FLEETWATCH_STORE_URL") or (_config.store.url if _config else None)
if not _store_url:
    raise RuntimeError("set FLEETWATCH_STORE_URL (or FLEETWATCH_CONFIG) to the store to show")

server = create_app(_store_url, tags={c.name: c.tags for c in _config.clusters} if _config else None,
                    incidents=_config.incidents if _config else None,
                    names={c.expected_cluster_id: c.name for c in _config.clusters if c.expected_cluster_id}
                    if _config else None).server
