"""Who may use the dashboard: HTTP basic auth when both FLEETWATCH_DASHBOARD_USER and
FLEETWATCH_DASHBOARD_PASSWORD are set (one without the other is an error); without it, anyone
who reaches the server, so a dashboard without auth that listens beyond loopback says so in a
warning."""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os

import flask

from streaming.config import ConfigError

__all__ = ["AUTH_PASSWORD_ENV", "AUTH_USER_ENV", "basic_auth_from_env", "guard_server"]

log = logging.getLogger(__name__)

AUTH_USER_ENV = "FLEETWATCH_DASHBOARD_USER"
AUTH_PASSWORD_ENV = "FLEETWATCH_DASHBOARD_PASSWORD"


def guard_server(server: flask.Flask, host: str | None) -> None:
    """Require basic auth on every request when the environment sets it; else warn when the server
    listens beyond loopback: on `host` when the caller knows it, else on the first request's."""
    auth = basic_auth_from_env()
    if auth is not None:
        _require_basic_auth(server, *auth)
        log.info("dashboard basic auth enabled", extra={"user": auth[0]})
    elif host is not None:
        _warn_if_exposed(host)
    else:
        _warn_once_if_served_beyond_loopback(server)


def basic_auth_from_env() -> tuple[str, str] | None:
    """The dashboard's basic-auth user and password, or None (no auth). One of the two variables
    without the other is a ConfigError: auth must not be off because of a typo."""
    user, password = os.environ.get(AUTH_USER_ENV), os.environ.get(AUTH_PASSWORD_ENV)
    if bool(user) != bool(password):
        missing = AUTH_PASSWORD_ENV if user else AUTH_USER_ENV
        raise ConfigError(f"dashboard basic auth needs both {AUTH_USER_ENV} and {AUTH_PASSWORD_ENV}; "
                          f"{missing} is not set")
    return (user, password) if user and password else None


def _warn_if_exposed(host: str) -> None:
    """Warn when a dashboard without auth listens on `host` beyond loopback: anyone who reaches it
    sees the fleet and can silence alerts."""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        log.warning(f"dashboard auth is off and it listens on {host}: anyone who reaches it can silence "
                    f"alerts (set {AUTH_USER_ENV} and {AUTH_PASSWORD_ENV})", extra={"host": host})


def _warn_once_if_served_beyond_loopback(server: flask.Flask) -> None:
    # Under gunicorn the bind is not the app's to know: the first request tells it (SERVER_NAME is
    # the listening address, for gunicorn and werkzeug alike).
    checked = False

    @server.before_request
    def check() -> None:
        nonlocal checked
        if not checked:
            checked = True
            _warn_if_exposed(flask.request.environ.get("SERVER_NAME", ""))


def _require_basic_auth(server: flask.Flask, user: str, password: str) -> None:
    expected_user, expected_password = user.encode(), password.encode()

    @server.before_request
    def check() -> flask.Response | None:
        auth = flask.request.authorization
        # compare_digest: no timing hint about how much of a guess was right.
        if (auth is not None and auth.type == "basic"
                and hmac.compare_digest((auth.username or "").encode(), expected_user)
                and hmac.compare_digest((auth.password or "").encode(), expected_password)):
            return None
        return flask.Response("authentication required\n", 401,
                              {"WWW-Authenticate": 'Basic realm="fleetwatch"'})
