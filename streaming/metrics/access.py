"""Who may read `/metrics` and where it listens: the auth the environment asks for
(`metrics_auth_from_env`: a bearer token or basic auth, secrets from the environment or files) and
the address (`metrics_host`, `add_metrics_arguments` for the commands that serve it; loopback by
default). The exposition itself is `streaming.metrics.exposition`.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import hmac
import ipaddress
import os
import re
from dataclasses import dataclass, field

from streaming.config import ConfigError, refuse_example_secret

__all__ = ["DEFAULT_METRICS_HOST", "MetricsAuth", "add_metrics_arguments", "is_loopback", "metrics_auth_from_env",
           "metrics_host"]

DEFAULT_METRICS_HOST = "127.0.0.1"


@dataclass(frozen=True)
class MetricsAuth:
    """What `/metrics` asks for: a bearer token, basic auth, or either. Secrets stay out of repr."""

    token: str | None = field(default=None, repr=False)
    user: str | None = None
    password: str | None = field(default=None, repr=False)

    def allows(self, header: str | None) -> bool:
        """Whether an Authorization header carries the token or the user and password."""
        scheme, _, value = (header or "").strip().partition(" ")
        value = value.strip()
        if scheme.lower() == "bearer" and self.token is not None:
            return hmac.compare_digest(value.encode(), self.token.encode())
        if scheme.lower() == "basic" and self.user is not None and self.password is not None:
            try:
                user, sep, password = base64.b64decode(value, validate=True).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                return False
            same_user = hmac.compare_digest(user.encode(), self.user.encode())
            same_password = hmac.compare_digest(password.encode(), self.password.encode())
            return bool(sep) and same_user and same_password
        return False


def secret_from_env(name: str) -> str | None:
    """$NAME, else the contents of the file $NAME_FILE names (one trailing newline dropped). A
    value of the shipped env examples (`change-me…`) is a ConfigError naming the variable."""
    value = os.environ.get(name)
    if value:
        refuse_example_secret(name, value)
        return value
    path = os.environ.get(f"{name}_FILE")
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ConfigError(f"{name}_FILE: cannot read {path}: {exc.strerror}") from None
    text = text[:-1] if text.endswith("\n") else text
    if not text:
        raise ConfigError(f"{name}_FILE: {path} is empty")
    refuse_example_secret(f"{name}_FILE ({path})", text)
    return text


def metrics_auth_from_env() -> MetricsAuth | None:
    """The auth `/metrics` asks for, from FLEETWATCH_METRICS_TOKEN(_FILE) and
    FLEETWATCH_METRICS_USER + FLEETWATCH_METRICS_PASSWORD(_FILE); None when none is set. A user
    without a password or the reverse is a ConfigError (auth must not be off because of a typo)."""
    token = secret_from_env("FLEETWATCH_METRICS_TOKEN")
    user, password = os.environ.get("FLEETWATCH_METRICS_USER") or None, secret_from_env("FLEETWATCH_METRICS_PASSWORD")
    if (user is None) != (password is None):
        missing = "FLEETWATCH_METRICS_PASSWORD" if user else "FLEETWATCH_METRICS_USER"
        raise ConfigError(f"/metrics basic auth needs both FLEETWATCH_METRICS_USER and "
                          f"FLEETWATCH_METRICS_PASSWORD; {missing} is not set")
    if token is None and user is None:
        return None
    return MetricsAuth(token=token, user=user, password=password)


_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST_NAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*")


def metrics_host(value: str) -> str:
    """`value` if it is an IP address or a host name to bind to (no port, no scheme); else
    ConfigError."""
    try:
        return str(ipaddress.ip_address(value.strip("[]")))
    except ValueError:
        pass
    if not _HOST_NAME.fullmatch(value):
        raise ConfigError(f"metrics host {value!r} is not an address or host name to listen on (no port, no scheme)")
    return value


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _host_argument(value: str) -> str:
    try:
        return metrics_host(value)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_metrics_arguments(p: argparse.ArgumentParser) -> None:
    """`--metrics-port` (default $FLEETWATCH_METRICS_PORT, else off) and `--metrics-host` (default
    $FLEETWATCH_METRICS_HOST, else 127.0.0.1), checked: not an address is a usage error."""
    port = os.environ.get("FLEETWATCH_METRICS_PORT")
    p.add_argument("--metrics-port", type=int, default=int(port) if port else None, metavar="PORT",
                   help="serve Prometheus /metrics on this port (default: $FLEETWATCH_METRICS_PORT, else off)")
    p.add_argument("--metrics-host", type=_host_argument,
                   default=os.environ.get("FLEETWATCH_METRICS_HOST") or DEFAULT_METRICS_HOST, metavar="ADDR",
                   help="address for /metrics (default: $FLEETWATCH_METRICS_HOST, else 127.0.0.1; 0.0.0.0 for "
                        "every address); FLEETWATCH_METRICS_TOKEN or FLEETWATCH_METRICS_USER/PASSWORD ask for auth")
