"""The SRE dashboard (Dash + plotly) over the fleetwatch store.

Its public face: `create_app`, the Dash app over a store, which `fleetwatch dashboard`
(dashboard/cli.py) runs with the development server and dashboard/wsgi.py serves under
gunicorn; and `basic_auth_from_env`, the basic-auth credentials (viewer, silencer) both check before they
start.

Inside: `app` builds the app from `layouts` (each page's controls), `page_content` (what each
page shows, from `queries` through `views`, one module per page in each), `callbacks` and `auth`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dashboard.app import create_app
    from dashboard.auth import basic_auth_from_env

__all__ = ["basic_auth_from_env", "create_app"]


def __getattr__(name: str) -> Any:
    # Imported on first use, not with the package: `fleetwatch` imports dashboard.cli for every
    # subcommand, and Dash and plotly should load only when the dashboard runs.
    if name == "create_app":
        from dashboard.app import create_app

        return create_app
    if name == "basic_auth_from_env":
        from dashboard.auth import basic_auth_from_env

        return basic_auth_from_env
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
