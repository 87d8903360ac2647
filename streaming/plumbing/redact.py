"""Keeping secrets out of logs, the store and error messages.

A receiver URL may carry credentials (`https://user:password@host/…`, `?token=…`), and its path
may be the secret (a Slack incoming webhook's is): a receiver URL is shown through `redact_url`
(scheme and host only), free text through `redact_text` / `Scrubber.clean`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urlsplit

__all__ = ["MASK", "Scrubber", "redact_text", "redact_url"]

MASK = "***"

# scheme://user[:password]@ inside free text.
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/\s@?#]+)@")
# ?key=value / &key=value after a URL path.
_QUERY_VALUE = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^\s?#]*\?)(?P<query>[^\s#]*)")


def redact_url(url: str) -> str:
    """How a URL is shown: `https://host:port/***`, `https://***@host/***`: never its user info,
    path or query, any of which may be the secret (a Slack incoming webhook's path is)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return MASK
    host = parts.netloc.rsplit("@", 1)[-1]
    if not parts.scheme or not host:
        return MASK
    user = f"{MASK}@" if "@" in parts.netloc else ""
    rest = f"/{MASK}" if parts.path not in ("", "/") or parts.query or parts.fragment else ""
    return f"{parts.scheme}://{user}{host}{rest}"


def redact_text(text: str) -> str:
    """Mask the credentials of every URL found in free text (user info and query values)."""
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", text)
    return _QUERY_VALUE.sub(lambda m: m["head"] + "&".join(
        f"{pair.split('=', 1)[0]}={MASK}" if "=" in pair else pair for pair in m["query"].split("&")), text)


class Scrubber:
    """Removes known secret values (and URL credentials) from any text before it is shown or stored."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets: list[str] = []
        for secret in secrets:
            self.add(secret)

    def add(self, secret: str | None) -> None:
        # Very short values would mask innocent text and are no secret anyway.
        if secret and len(secret) >= 4 and secret not in self._secrets:
            self._secrets.append(secret)
            self._secrets.sort(key=len, reverse=True)

    def clean(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, MASK)
        return redact_text(text)
