"""What a job is made of, as the coordinator is given it: a live plan or a replay plan.

Two plans rather than one with a flag: a live job and a replay share the coordinator's sequence
(streaming/job/coordinator.py) but not their parts. A live job reads the telemetry topics from a
bus (an embedded one when none is configured, or the demo's), waits for its store, may serve
/metrics and run companions beside its query, and runs until it is stopped. A replay reads a file,
has no bus, writes to its caller's store or none, and runs until the file is read, within a time.
What each does at the steps where they differ is the coordinator's (its `_LiveSteps`,
`_ReplaySteps`), so that Spark, the queries and their supervision start in one module.

`Wiring` is what is open before Spark starts, as the observer and the companions are told it;
`Companions` are the parts a live job runs beside its query (the demo's).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, Protocol

from streaming.bus import EmbeddedBus
from streaming.config import FleetwatchConfig
from streaming.job.recorded import REPLAY_QUERY, Recording
from streaming.sinks import KeyedAlert
from streaming.store import Store

__all__ = ["Companions", "LivePlan", "Plan", "ReplayPlan", "Wiring"]


@dataclass(frozen=True)
class Wiring:
    """What is open before Spark starts: told to the observer and the companions."""

    query: str
    bus: str | None  # the bus's bootstrap address; None for a replay
    embedded: bool  # the bus is an embedded broker the job started
    store: Store | None
    metrics_url: str | None
    note: Callable[[], str | None]  # what the status line keeps saying (restarts, the companions' state)


class Companions(Protocol):
    """Parts a job runs beside its query (the demo's). Each registers its own stop on `parts`."""

    def start(self, wiring: Wiring, parts: ExitStack) -> None: ...  # after the bus and the store, before Spark

    def config(self, config: FleetwatchConfig) -> FleetwatchConfig: ...  # the job's config, once Spark is up

    def started(self, parts: ExitStack) -> None: ...  # once the query runs

    def poll(self) -> None: ...  # every second while the query runs

    def note(self) -> str | None: ...  # their state, for the status line


@dataclass(frozen=True)
class LivePlan:
    """The live job over the telemetry topics (`fleetwatch run`, the spark-submit driver, the demo)."""

    app_name: str = "fleetwatch"
    # The bus when the job starts its own (the demo's); otherwise one is started only when the
    # config names no bus.
    embedded_bus: EmbeddedBus | None = None
    metrics: tuple[int, str] | None = None  # /metrics on (port, host)
    companions: Companions | None = None


@dataclass(frozen=True)
class ReplayPlan:
    """A replay of a recorded file (`fleetwatch replay`, the tests' and benches' replays)."""

    recording: Recording
    store: Store | None = None  # the caller's, left open; None: the alerts go to `on_alerts` only
    on_alerts: Callable[[list[KeyedAlert]], Any] | None = None
    timeout_s: float = 3600.0  # from the coordinator's start to the file read
    app_name: str = REPLAY_QUERY


Plan = LivePlan | ReplayPlan
