"""WSGI entry point: `FLEETWATCH_STORE_URL=... gunicorn -w 2 dashboard.wsgi:server`."""

from __future__ import annotations

import os

from dashboard.app import create_app

__all__ = ["server"]

server = create_app(os.environ["FLEETWATCH_STORE_URL"]).server
