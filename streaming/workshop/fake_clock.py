"""The one fake clock of the tests and benches: a time in seconds that only the caller moves."""

from __future__ import annotations

import time

__all__ = ["FakeClock"]


class FakeClock:
    """Called, it gives `now` (seconds, as time.time() or time.monotonic() would); the test moves it.

    `start` defaults to the real wall time, so that rows written with it look current to the store."""

    def __init__(self, start: float | None = None) -> None:
        self.now = time.time() if start is None else start

    def __call__(self) -> float:
        return self.now

    @property
    def ms(self) -> int:
        return int(self.now * 1000)

    def set_ms(self, ms: int) -> None:
        self.now = ms / 1000

    def advance(self, seconds: float) -> None:
        self.now += seconds
