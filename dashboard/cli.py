"""`fleetwatch dashboard`: serve the dashboard with the development server.

For more than a few users, serve `dashboard.wsgi:server` with gunicorn instead.
"""

from __future__ import annotations

import argparse
import sys

from sqlalchemy.exc import SQLAlchemyError

from streaming.config import ConfigError, load_config
from streaming.plumbing.errors import first_line

__all__ = ["command", "configure_parser"]


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE",
                   help="config file; its store.url names the store to show, its clusters' tags the filters")
    p.add_argument("--store-url", metavar="URL",
                   help="store to show (overrides the config's store.url), e.g. sqlite:///var/fleetwatch.db")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8050, help="port to listen on (default 8050)")
    p.add_argument("--allow-local-silences", action="store_true",
                   help="without auth, let whoever reaches this loopback address silence alerts (the person at "
                        "the machine; refused with any other --host). Off by default: without auth the dashboard "
                        "is read-only, and under gunicorn it always is (set FLEETWATCH_DASHBOARD_SILENCER_USER/"
                        "PASSWORD there). With auth it changes nothing")


def command(args: argparse.Namespace) -> int:
    # Dash and plotly load only when the dashboard runs, not for every other subcommand.
    from dashboard import create_app
    from dashboard.auth import allowed_hosts_from_env, basic_auth_from_env, local_silences_refusal

    try:
        if args.allow_local_silences and (refusal := local_silences_refusal(args.host)) is not None:
            raise ConfigError(f"--allow-local-silences: {refusal}")
        config = load_config(args.config)
        basic_auth_from_env()  # one variable of the two is an error here, not auth silently off
        allowed_hosts_from_env()
    except ConfigError as exc:
        print(f"fleetwatch dashboard: {exc}", file=sys.stderr)
        return 2
    store_url = args.store_url or config.store.url
    # The overview's tag filters: each configured cluster's tags, by target name.
    tags = {c.name: c.tags for c in config.clusters}
    names = {c.expected_cluster_id: c.name for c in config.clusters if c.expected_cluster_id}
    try:
        app = create_app(store_url, tags=tags, incidents=config.incidents, host=args.host,
                         local_silences=args.allow_local_silences, names=names)
    except SQLAlchemyError as exc:
        # A bad URL or an unreachable database: one line, not a traceback, and not the URL,
        # which may hold a password.
        print(f"fleetwatch dashboard: cannot open the store: {first_line(exc, named=True)}", file=sys.stderr)
        return 2
    print(f"dashboard on http://{args.host}:{args.port}", file=sys.stderr)
    app.run(host=args.host, port=args.port, debug=False)
    return 0
