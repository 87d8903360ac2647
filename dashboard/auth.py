"""Who may use the dashboard, and who may silence from it.

Two roles, each an HTTP basic-auth credential from the environment (never from a file the config
names, never logged, never shown):

- **viewer**: FLEETWATCH_DASHBOARD_USER and FLEETWATCH_DASHBOARD_PASSWORD. Sees every page; the
  silence callback refuses it (server-side: the callback checks the role before it writes).
- **silencer**: FLEETWATCH_DASHBOARD_SILENCER_USER and FLEETWATCH_DASHBOARD_SILENCER_PASSWORD.
  Sees everything and may silence; the silence records `dashboard (<user>)` as its author.

Auth is on when either credential is set; then every request needs one of them. Each pair is
both variables or neither (one without the other is a ConfigError: auth must not be off, or a
role missing, because of a typo), the two user names differ, and a password of the shipped env
examples (`change-me…`, any case) is a ConfigError. With only the viewer's, the
dashboard is read-only (silence with `fleetwatch silence add`).

Without auth, anyone who reaches the server sees the fleet, and nobody may silence: under a WSGI
server (gunicorn) the app cannot know who is at the other end of a loopback socket (a same-host
reverse proxy forwards every remote user there, and with `--bind unix:` gunicorn fills SERVER_NAME
from the client's Host). Only `fleetwatch dashboard`, which knows the address it listens on, may
let the person at the machine silence without credentials, and only when asked
(`--allow-local-silences`, `local_silences=True`) on a loopback address. A dashboard without auth
that listens beyond loopback says so in a warning. The listening address is `host` when the caller
knows it, else each request's SERVER_NAME (the Host checks below; never a reason to silence).

Host and Origin, before auth (DNS rebinding, cross-site requests):

- A request whose Host header is not an allowed host gets 403. FLEETWATCH_DASHBOARD_ALLOWED_HOSTS
  lists them (comma-separated names or addresses, any port; `.example.com` is that domain and its
  subdomains; `*` any host). Unset, a dashboard listening on loopback allows `localhost` and
  loopback addresses only, so a page of evil.example that rebinds its name to 127.0.0.1 is
  refused; one listening beyond loopback allows any Host (behind an Ingress the name is not the
  app's to know: set the variable).
- A request that may change something (any method but GET, HEAD and OPTIONS: every Dash callback,
  among them the silence) gets 403 unless its Origin, else its Referer, is the dashboard's own
  origin: the same host and port as its Host header. Browsers send Origin with every POST, so a
  form or script of another site cannot silence through a signed-in browser.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

import flask

from streaming.config import ConfigError, refuse_example_secret

__all__ = [
    "ALLOWED_HOSTS_ENV",
    "AUTH_PASSWORD_ENV",
    "AUTH_USER_ENV",
    "SILENCER",
    "SILENCER_PASSWORD_ENV",
    "SILENCER_USER_ENV",
    "VIEWER",
    "Credential",
    "allowed_hosts_from_env",
    "basic_auth_from_env",
    "guard_server",
    "local_silences_refusal",
    "silence_author",
]

log = logging.getLogger(__name__)

AUTH_USER_ENV = "FLEETWATCH_DASHBOARD_USER"
AUTH_PASSWORD_ENV = "FLEETWATCH_DASHBOARD_PASSWORD"
SILENCER_USER_ENV = "FLEETWATCH_DASHBOARD_SILENCER_USER"
SILENCER_PASSWORD_ENV = "FLEETWATCH_DASHBOARD_SILENCER_PASSWORD"
ALLOWED_HOSTS_ENV = "FLEETWATCH_DASHBOARD_ALLOWED_HOSTS"

_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# A Host header (or an Origin's netloc): a name or IPv4 address, or a bracketed IPv6 address, and a port.
_HOST = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)(?::(?P<port>[0-9]{1,5}))?")

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
    (no auth). A user variable without its password (or the reverse), one user name for both
    roles, or a password of the shipped examples (`change-me…`) is a ConfigError."""
    found = []
    for role, (user_env, password_env) in _ROLE_ENV.items():
        user, password = os.environ.get(user_env), os.environ.get(password_env)
        if bool(user) != bool(password):
            missing = password_env if user else user_env
            raise ConfigError(f"dashboard basic auth needs both {user_env} and {password_env}; "
                              f"{missing} is not set")
        refuse_example_secret(password_env, password)
        if user and password:
            found.append(Credential(user, password, role))
    if len(found) == 2 and found[0].user == found[1].user:
        raise ConfigError(f"{AUTH_USER_ENV} and {SILENCER_USER_ENV} name the same user: give the "
                          "silencer a name of its own")
    return found or None


def allowed_hosts_from_env() -> tuple[str, ...] | None:
    """FLEETWATCH_DASHBOARD_ALLOWED_HOSTS as lower-case entries, or None when unset (the default:
    loopback names when listening on loopback, else any). A malformed entry is a ConfigError."""
    raw = os.environ.get(ALLOWED_HOSTS_ENV)
    if raw is None or not raw.strip():
        return None
    entries = []
    for entry in (e.strip().lower() for e in raw.split(",")):
        if not entry:
            continue
        name = entry[1:] if entry.startswith(".") else entry
        if entry != "*" and (not _HOST.fullmatch(name) or _HOST.fullmatch(name)["port"] is not None):
            raise ConfigError(f"{ALLOWED_HOSTS_ENV}: {entry!r} is not a host name or address (no port, no scheme)")
        entries.append(entry.strip("[]"))
    return tuple(entries)


def local_silences_refusal(host: str | None) -> str | None:
    """Why silences without credentials may not be allowed for a server on `host` (None: it may):
    only a server whose caller knows it listens on loopback may allow them."""
    if host is None:
        return ("silences without credentials need the listening address: only `fleetwatch dashboard` "
                "allows them, never a WSGI server")
    if not _is_loopback(host):
        return f"silences without credentials are for the person at the machine: {host} is not a loopback address"
    return None


def guard_server(server: flask.Flask, host: str | None, local_silences: bool = False) -> None:
    """Require basic auth on every request when the environment sets a credential, and note
    each request's role (`silence_author` reads it); without auth, warn when the server listens
    beyond loopback: on `host` when the caller knows it, else on the first request's address.

    Without auth every request is a viewer's, unless `local_silences` (the opt-in of `fleetwatch
    dashboard`) and the server listens on the loopback `host`: then the person at the machine may
    silence. `local_silences` without such a `host` is a ConfigError."""
    if local_silences and (refusal := local_silences_refusal(host)) is not None:
        raise ConfigError(refusal)
    credentials = basic_auth_from_env()
    if credentials is not None:
        log.info("dashboard basic auth enabled",
                 extra={"user": next((c.user for c in credentials if c.role == VIEWER), None),
                        "silencer": next((c.user for c in credentials if c.role == SILENCER), None)})
    elif host is not None:
        _warn_if_exposed(host)
    anyone_silences = credentials is None and local_silences  # checked above: on a loopback `host`
    if not anyone_silences and not any(c.role == SILENCER for c in credentials or ()):
        log.info(f"dashboard is read-only: no silencer credential ({SILENCER_USER_ENV}, {SILENCER_PASSWORD_ENV})")
    allowed = allowed_hosts_from_env()
    warned = host is not None

    @server.before_request
    def check() -> flask.Response | None:
        nonlocal warned
        flask.g.dashboard_user = None
        listening = host if host is not None else flask.request.environ.get("SERVER_NAME", "")
        refusal = _foreign_request(allowed, listening)
        if refusal is not None:
            log.warning("dashboard request refused", extra={"reason": refusal, "method": flask.request.method})
            return flask.Response(f"forbidden: {refusal}\n", 403, {"Content-Type": "text/plain"})
        if credentials is not None:
            found = _authenticate(credentials)
            if found is None:
                return flask.Response("authentication required\n", 401,
                                      {"WWW-Authenticate": 'Basic realm="fleetwatch"'})
            flask.g.dashboard_user, flask.g.dashboard_role = found.user, found.role
            return None
        if not warned:
            warned = True
            _warn_if_exposed(listening)
        flask.g.dashboard_role = SILENCER if anyone_silences else VIEWER
        return None


def silence_author() -> tuple[str | None, str]:
    """For the request being served: (the author a silence records, None when its role may not
    silence; what to tell the user when it may not)."""
    role, user = flask.g.get("dashboard_role"), flask.g.get("dashboard_user")
    if role == SILENCER:
        return (f"dashboard ({user})" if user else "dashboard"), ""
    if user:
        return None, f"Not silenced: {user} may not silence (a viewer); sign in as a silencer."
    return None, ("Not silenced: this dashboard has no auth, so it may not silence (set "
                  f"{SILENCER_USER_ENV} and {SILENCER_PASSWORD_ENV}, or use `fleetwatch silence add`).")


def _split_host(netloc: str) -> tuple[str, int | None] | None:
    """(lower-case host without brackets, port or None) of a Host header or netloc; None if malformed."""
    match = _HOST.fullmatch(netloc.strip())
    if match is None:
        return None
    return match["host"].lower().strip("[]"), int(match["port"]) if match["port"] else None


def _host_allowed(name: str, allowed: tuple[str, ...] | None, listening: str) -> bool:
    if allowed is None:  # the default: loopback names on a loopback dashboard, else anything
        return not _is_loopback(listening) or _is_loopback(name)
    return any(entry == "*" or name == entry or (entry.startswith(".") and (name == entry[1:] or name.endswith(entry)))
               for entry in allowed)


def _foreign_request(allowed: tuple[str, ...] | None, listening: str) -> str | None:
    """Why the request being served is refused (its Host is not the dashboard's, or it may change
    something and comes from another origin), or None."""
    request = flask.request
    host_header = request.headers.get("Host", "")
    own = _split_host(host_header)
    if own is None or not _host_allowed(own[0], allowed, listening):
        return "this dashboard does not answer to that Host"
    if request.method in _SAFE_METHODS:
        return None
    source = request.headers.get("Origin") or request.headers.get("Referer")
    if not source or source == "null":
        return "a request that may change something needs its Origin (or Referer)"
    parts = urlsplit(source)
    if parts.scheme not in ("http", "https") or not parts.netloc or "@" in parts.netloc:
        return "cross-origin request"
    origin = _split_host(parts.netloc)
    default = 443 if parts.scheme == "https" else 80
    if origin is None or (origin[0], origin[1] or default) != (own[0], own[1] or default):
        return "cross-origin request"
    return None


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
    sees the fleet (and nobody may silence)."""
    if not _is_loopback(host):
        log.warning(f"dashboard auth is off and it listens on {host}: anyone who reaches it sees the fleet, "
                    f"and silencing is refused (set {AUTH_USER_ENV}/{AUTH_PASSWORD_ENV} for viewers and "
                    f"{SILENCER_USER_ENV}/{SILENCER_PASSWORD_ENV} for silencers)", extra={"host": host})
