"""Who may use the dashboard, and who may silence from it.

Two roles, each an HTTP basic-auth credential from the environment (never from a file the config
names, never logged, never shown):

- **viewer**: FLEETWATCH_DASHBOARD_USER and FLEETWATCH_DASHBOARD_PASSWORD. Sees every page; the
  silence callback refuses it (server-side: the callback checks the role before it writes).
- **silencer**: FLEETWATCH_DASHBOARD_SILENCER_USER and FLEETWATCH_DASHBOARD_SILENCER_PASSWORD.
  Sees everything and may silence; the silence records `dashboard (<user>)` as its author.

Auth is on when either credential is set; then every request needs one of them. Each pair is
both variables or neither (one without the other is a ConfigError: auth must not be off, or a
role missing, because of a typo), and the two user names differ. With only the viewer's, the
dashboard is read-only (silence with `fleetwatch silence add`).

Without auth, anyone who reaches the server sees the fleet; silencing is allowed only when the
server listens on loopback (the person at the machine: `fleetwatch dashboard` without `--host`).
A dashboard without auth that listens beyond loopback says so in a warning and refuses silences.
The listening address is `host` when the caller knows it, else each request's SERVER_NAME (the
bind address under gunicorn and werkzeug alike).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
from dataclasses import dataclass

import flask

from streaming.config import ConfigError

__all__ = [
    "AUTH_PASSWORD_ENV",
    "AUTH_USER_ENV",
    "SILENCER",
    "SILENCER_PASSWORD_ENV",
    "SILENCER_USER_ENV",
    "VIEWER",
    "Credential",
    "basic_auth_from_env",
    "guard_server",
    "silence_author",
]

log = logging.getLogger(__name__)

AUTH_USER_ENV = "FLEETWATCH_DASHBOARD_USER"
AUTH_PASSWORD_ENV = "FLEETWATCH_DASHBOARD_PASSWORD"
SILENCER_USER_ENV = "FLEETWATCH_DASHBOARD_SILENCER_USER"
SILENCER_PASSWORD_ENV = "FLEETWATCH_DASHBOARD_SILENCER_PASSWORD"

VIEWER = "viewer"
SILENCER = "silencer"
_ROLE_ENV = {VIEWER: (AUTH_USER_ENV, AUTH_PASSWORD_ENV), SILENCER: (SILENCER_USER_ENV, SILENCER_PASSWORD_ENV)}


@dataclass(frozen=True)
class Credential:
    """One basic-auth user of the dashboard and its role. The password never shows in a repr."""

    user: str
    password: str
    role: str

    def __repr__(self) -> str:
        return f"Credential(user={self.user!r}, role={self.role!r})"


def basic_auth_from_env() -> list[Credential] | None:
    """The dashboard's credentials (viewer first, then silencer), or None when neither is set
    (no auth). A user variable without its password (or the reverse), or one user name for both
    roles, is a ConfigError."""
    found = []
    for role, (user_env, password_env) in _ROLE_ENV.items():
        user, password = os.environ.get(user_env), os.environ.get(password_env)
        if bool(user) != bool(password):
            missing = password_env if user else user_env
            raise ConfigError(f"dashboard basic auth needs both {user_env} and {password_env}; "
                              f"{missing} is not set")
        if user and password:
            found.append(Credential(user, password, role))
    if len(found) == 2 and found[0].user == found[1].user:
        raise ConfigError(f"{AUTH_USER_ENV} and {SILENCER_USER_ENV} name the same user: give the "
                          "silencer a name of its own")
    return found or None


def guard_server(server: flask.Flask, host: str | None) -> None:
    """Require basic auth on every request when the environment sets a credential, and note
    each request's role (`silence_author` reads it); without auth, warn when the server listens
    beyond loopback: on `host` when the caller knows it, else on the first request's address."""
    credentials = basic_auth_from_env()
    if credentials is not None:
        log.info("dashboard basic auth enabled",
                 extra={"user": next((c.user for c in credentials if c.role == VIEWER), None),
                        "silencer": next((c.user for c in credentials if c.role == SILENCER), None)})
        if not any(c.role == SILENCER for c in credentials):
            log.info(f"dashboard is read-only: no silencer credential ({SILENCER_USER_ENV}, "
                     f"{SILENCER_PASSWORD_ENV})")
    elif host is not None:
        _warn_if_exposed(host)
    warned = host is not None

    @server.before_request
    def check() -> flask.Response | None:
        nonlocal warned
        flask.g.dashboard_user = None
        if credentials is not None:
            found = _authenticate(credentials)
            if found is None:
                return flask.Response("authentication required\n", 401,
                                      {"WWW-Authenticate": 'Basic realm="fleetwatch"'})
            flask.g.dashboard_user, flask.g.dashboard_role = found.user, found.role
            return None
        listening = host if host is not None else flask.request.environ.get("SERVER_NAME", "")
        if not warned:
            warned = True
            _warn_if_exposed(listening)
        flask.g.dashboard_role = SILENCER if _is_loopback(listening) else VIEWER
        return None


def silence_author() -> tuple[str | None, str]:
    """For the request being served: (the author a silence records, None when its role may not
    silence; what to tell the user when it may not)."""
    role, user = flask.g.get("dashboard_role"), flask.g.get("dashboard_user")
    if role == SILENCER:
        return (f"dashboard ({user})" if user else "dashboard"), ""
    if user:
        return None, f"Not silenced: {user} may not silence (a viewer); sign in as a silencer."
    return None, ("Not silenced: this dashboard has no auth and listens beyond loopback, so it may not "
                  f"silence (set {SILENCER_USER_ENV} and {SILENCER_PASSWORD_ENV}).")


def _authenticate(credentials: list[Credential]) -> Credential | None:
    auth = flask.request.authorization
    if auth is None or auth.type != "basic":
        return None
    user, password = (auth.username or "").encode(), (auth.password or "").encode()
    found = None
    for credential in credentials:  # every one compared: no timing hint about which came close
        # compare_digest: no timing hint about how much of a guess was right.
        same_user = hmac.compare_digest(user, credential.user.encode())
        same_password = hmac.compare_digest(password, credential.password.encode())
        if same_user and same_password:
            found = credential
    return found


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host.lower() == "localhost"


def _warn_if_exposed(host: str) -> None:
    """Warn when a dashboard without auth listens on `host` beyond loopback: anyone who reaches it
    sees the fleet (and silencing is refused there)."""
    if not _is_loopback(host):
        log.warning(f"dashboard auth is off and it listens on {host}: anyone who reaches it sees the fleet, "
                    f"and silencing is refused (set {AUTH_USER_ENV}/{AUTH_PASSWORD_ENV} for viewers and "
                    f"{SILENCER_USER_ENV}/{SILENCER_PASSWORD_ENV} for silencers)", extra={"host": host})
