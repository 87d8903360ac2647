"""Sending one HTTP request to a receiver, and the backoff between attempts.

Each attempt has one deadline for the whole of it (`alerting.delivery.attempt_timeout_ms`, the
CLI's `--timeout`): connecting, sending the request, reading the status line and headers, and
reading the first `MAX_BODY_BYTES` of the body (enough for an error message; the rest is never
read). httpx's own timeouts are per read, so a receiver that trickles its headers or its body a
byte a second, or never ends its body, would hold a plain request forever: the attempts run on
one event loop thread under `asyncio.timeout`, which cancels the request (its connection is
closed) when the deadline passes. Such an attempt is a failure like any timeout: retried with
backoff, and subject to the dead-letter limits. A 2xx whose body does not end (up to
`MAX_BODY_BYTES`) within the deadline is a failure too: at least once, the receiver deduplicates.

Only a 2xx is a success. Network errors, timeouts, 408, 425, 429 and 5xx may succeed later
(retried, honouring Retry-After, bounded); any other answer is permanent (a redirect too: the
notifier never follows one). Errors are scrubbed of the receivers' secrets before anyone sees them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import random
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import httpx

from streaming.notify.policy import parse_retry_after
from streaming.notify.receivers import HttpRequest, Receiver
from streaming.plumbing.errors import FleetwatchError
from streaming.plumbing.redact import Scrubber

__all__ = ["MAX_BODY_BYTES", "NOT_SENT", "RETRYABLE_STATUS", "Outcome", "Sender"]

RETRYABLE_STATUS = {408, 425, 429}
# How much of an answer's body is read (an error message); the rest is never read.
MAX_BODY_BYTES = 16 * 1024


@dataclass(frozen=True)
class Outcome:
    ok: bool
    permanent: bool = False
    error: str | None = None
    retry_after_ms: int | None = None
    sent: bool = True  # False: not sent at all (the lease would not cover the attempt): nothing to record


NOT_SENT = Outcome(False, error="not sent: the notifier lease does not cover the attempt", sent=False)


class _AttemptTimeout(FleetwatchError):
    pass


class Sender:
    """One HTTP client per receiver (bounded connections, no redirects), each attempt under one
    deadline (`timeout_s`, the whole attempt), and the backoff policy. `send` is called from any
    thread; the requests run on the sender's own event loop thread."""

    def __init__(self, receivers: Iterable[Receiver], scrubber: Scrubber, now_ms: Callable[[], int], *,
                 timeout_s: float, concurrency: int, retry_base_ms: int, retry_max_ms: int,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.scrubber = scrubber
        self.now_ms = now_ms
        self.timeout_s = timeout_s
        self.retry_base_ms = retry_base_ms
        self.retry_max_ms = retry_max_ms
        # The per-phase timeouts of httpx are within the attempt's deadline, which bounds the sum.
        timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, 5.0))
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        # identity: a compressed answer would be decompressed whole, whatever MAX_BODY_BYTES says.
        self._clients = {r.name: httpx.AsyncClient(timeout=timeout, limits=limits, follow_redirects=False,
                                                   transport=transport, headers={"Accept-Encoding": "identity"})
                         for r in receivers}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="notify-http", daemon=True)
        self._thread.start()

    def close(self) -> None:
        if self._loop.is_closed():
            return

        async def close_clients() -> None:
            for client in self._clients.values():
                await client.aclose()

        with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
            asyncio.run_coroutine_threadsafe(close_clients(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()

    def _retry_after(self, response: httpx.Response) -> int | None:
        value = response.headers.get("Retry-After")
        return None if value is None else parse_retry_after(value, self.now_ms(), self.retry_max_ms)

    async def _attempt(self, client: httpx.AsyncClient, request: HttpRequest) -> tuple[httpx.Response, bytes]:
        """The status, headers and first MAX_BODY_BYTES of the answer, all within the deadline."""
        try:
            async with asyncio.timeout(self.timeout_s):
                async with client.stream(request.method, request.url, content=request.body,
                                         headers=request.headers) as response:
                    body = bytearray()
                    try:
                        # raw: a compressed body is never inflated (its error text is then garbled, not huge)
                        async for chunk in response.aiter_raw():
                            body += chunk
                            if len(body) >= MAX_BODY_BYTES:
                                break
                    except httpx.StreamConsumed:  # an answer already in memory (a test's transport)
                        body = bytearray(response.content)
                    return response, bytes(body[:MAX_BODY_BYTES])
        except TimeoutError as exc:
            raise _AttemptTimeout from exc

    def send(self, receiver: Receiver, request: HttpRequest) -> Outcome:
        future = asyncio.run_coroutine_threadsafe(self._attempt(self._clients[receiver.name], request), self._loop)
        try:
            # The coroutine ends itself at the deadline; this wait only guards against a stuck loop.
            response, body = future.result(self.timeout_s + 10)
        except (_AttemptTimeout, concurrent.futures.TimeoutError):
            future.cancel()
            return Outcome(False, error=f"timed out: no complete answer within {self.timeout_s:g} s "
                                        "(the attempt's limit: connect, send, status, headers and body)")
        except httpx.TimeoutException as exc:
            return Outcome(False, error=f"timed out ({type(exc).__name__})")
        except httpx.HTTPError as exc:
            return Outcome(False, error=self.scrubber.clean(f"{type(exc).__name__}: {exc}"))
        code = response.status_code
        if 200 <= code < 300:
            return Outcome(True)
        text = " ".join(body.decode("utf-8", "replace").split())[:300]
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
