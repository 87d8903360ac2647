"""Sending one HTTP request to a receiver, and the backoff between attempts.

Only a 2xx is a success. Network errors, timeouts, 408, 425, 429 and 5xx may succeed later
(retried, honouring Retry-After, bounded); any other answer is permanent (a redirect too: the
notifier never follows one). Errors are scrubbed of the receivers' secrets before anyone sees them.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import httpx

from streaming.notify.policy import parse_retry_after
from streaming.notify.receivers import HttpRequest, Receiver
from streaming.redact import Scrubber

__all__ = ["RETRYABLE_STATUS", "Outcome", "Sender"]

RETRYABLE_STATUS = {408, 425, 429}


@dataclass(frozen=True)
class Outcome:
    ok: bool
    permanent: bool = False
    error: str | None = None
    retry_after_ms: int | None = None


class Sender:
    """One HTTP client per receiver (bounded connections, no redirects), and the backoff policy."""

    def __init__(self, receivers: Iterable[Receiver], scrubber: Scrubber, now_ms: Callable[[], int], *,
                 timeout_s: float, concurrency: int, retry_base_ms: int, retry_max_ms: int,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.scrubber = scrubber
        self.now_ms = now_ms
        self.retry_base_ms = retry_base_ms
        self.retry_max_ms = retry_max_ms
        timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, 5.0))
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        self._clients = {r.name: httpx.Client(timeout=timeout, limits=limits, follow_redirects=False,
                                              transport=transport)
                         for r in receivers}

    def close(self) -> None:
        for client in self._clients.values():
            client.close()

    def _retry_after(self, response: httpx.Response) -> int | None:
        value = response.headers.get("Retry-After")
        return None if value is None else parse_retry_after(value, self.now_ms(), self.retry_max_ms)

    def send(self, receiver: Receiver, request: HttpRequest) -> Outcome:
        try:
            response = self._clients[receiver.name].request(request.method, request.url, content=request.body,
                                                            headers=request.headers)
        except httpx.TimeoutException as exc:
            return Outcome(False, error=f"timed out ({type(exc).__name__})")
        except httpx.HTTPError as exc:
            return Outcome(False, error=self.scrubber.clean(f"{type(exc).__name__}: {exc}"))
        code = response.status_code
        if 200 <= code < 300:
            return Outcome(True)
        text = " ".join(response.text.split())[:300]
        error = self.scrubber.clean(f"HTTP {code} {response.reason_phrase}" + (f": {text}" if text else ""))
        if code >= 500 or code in RETRYABLE_STATUS:
            return Outcome(False, error=error, retry_after_ms=self._retry_after(response))
        if 300 <= code < 400:
            error = self.scrubber.clean(f"HTTP {code} {response.reason_phrase}: redirects are not followed; "
                                        "configure the final URL")
        return Outcome(False, permanent=True, error=error)

    def backoff_ms(self, attempts: int, retry_after_ms: int | None = None) -> int:
        """Exponential backoff with jitter: half the step fixed, half random (never a thundering herd)."""
        step = min(self.retry_max_ms, self.retry_base_ms * 2 ** min(max(attempts - 1, 0), 30))
        delay = step / 2 + random.uniform(0, step / 2)
        if retry_after_ms is not None:
            delay = max(delay, min(retry_after_ms, self.retry_max_ms))
        return int(delay)
