"""What a probe round's exchanges wait for (`Slots`): the concurrency limits of one round, shared by its
targets' exchanges and by the quorum readings (quorum.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from streaming.collect.probe.targets import ProbeOptions, Target
from streaming.collect.protocol.client import LOOKUPS_PER_TARGET

__all__ = ["Slots"]

# Lookup threads at most (LOOKUPS_PER_TARGET per target below it): 128 targets whose names all hang
# at once before a healthy target's lookup waits. Threads start as lookups need them.
_LOOKUP_THREADS_MAX = 1024


@dataclass
class Slots:
    """What a round's exchanges wait for: a slot of their target (`target_concurrency`), then one
    of all targets' (`concurrency`); the target's turn to decode a big answer off the loop; and
    its places for name lookups in the lookup threads.

    The target's slot comes first, so one target never holds more than `target_concurrency` of
    the shared ones: its black holes wait in its own queue, not in front of everybody else's.
    A lookup holds its place until its thread returns (getaddrinfo cannot be stopped), and the pool
    has `LOOKUPS_PER_TARGET` threads per target (up to `_LOOKUP_THREADS_MAX`): a target whose names
    never resolve blocks its own places, never another target's lookups."""

    shared: asyncio.Semaphore
    per_target: dict[str, asyncio.Semaphore]
    decoding: dict[str, asyncio.Semaphore]
    lookups: dict[str, asyncio.Semaphore]
    lookup_pool: ThreadPoolExecutor

    @classmethod
    def of(cls, targets: Sequence[Target], options: ProbeOptions) -> Slots:
        threads = max(1, min(LOOKUPS_PER_TARGET * len(targets), _LOOKUP_THREADS_MAX))
        return cls(asyncio.Semaphore(options.concurrency),
                   {t.name: asyncio.Semaphore(options.target_concurrency) for t in targets},
                   {t.name: asyncio.Semaphore(1) for t in targets},
                   {t.name: asyncio.Semaphore(LOOKUPS_PER_TARGET) for t in targets},
                   ThreadPoolExecutor(max_workers=threads, thread_name_prefix="probe-dns"))

    def of_target(self, target: Target) -> dict[str, Any]:
        """The keyword arguments of a connection of `target`: its slots, and the lookup threads."""
        return {"decode_slot": self.decoding[target.name], "lookup_slot": self.lookups[target.name],
                "lookup_pool": self.lookup_pool}

    def close(self) -> None:
        """No new lookups; a thread still blocked in one ends when its lookup returns."""
        self.lookup_pool.shutdown(wait=False, cancel_futures=True)
