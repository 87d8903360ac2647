"""The job coordinator (streaming/job/coordinator.py), the one start sequence of every job, and the
console as its observer (streaming.job.console.JobView): what the observer is told, in which order.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest
from support.paths import EXAMPLES

from streaming.config import FleetwatchConfig
from streaming.job import JobCoordinator, LivePlan, Outcome, Recording, ReplayPlan, Wiring
from streaming.job.console import JobView, Status
from streaming.plumbing.ports import free_port
from streaming.store import Store


class Told:
    """An observer that writes down what it is told."""

    def __init__(self) -> None:
        self.said: list[tuple] = []

    def opened(self, wiring: Wiring) -> None:
        self.said.append(("opened", wiring.query, wiring.bus, wiring.store, wiring.note()))

    def phase(self, text: str | None) -> None:
        self.said.append(("phase", text))

    def started(self, query) -> None:
        self.said.append(("started", query.query.name, query.query.isActive))

    def stopping(self) -> None:
        self.said.append(("stopping",))

    def closed(self) -> None:
        self.said.append(("closed",))


@pytest.mark.spark
def test_a_replay_runs_through_the_coordinator_and_tells_its_observer_each_step(spark, test_config):
    if not EXAMPLES.is_dir():
        pytest.skip(f"worked examples not found at {EXAMPLES}")
    told, collected = Told(), []
    plan = ReplayPlan(Recording.of(EXAMPLES / "identity.jsonl"), on_alerts=collected.extend)
    outcome = JobCoordinator(test_config, plan, told).run()
    assert told.said == [("opened", "fleetwatch_replay", None, None, None), ("phase", "starting Spark"),
                         ("phase", "starting the job"), ("started", "fleetwatch_replay", True), ("phase", None),
                         ("stopping",), ("closed",)]
    assert outcome.failure is None and outcome.query is not None and not outcome.query.query.isActive
    expected = (EXAMPLES / "identity.expected.jsonl").read_text().splitlines()
    assert len(collected) == len(expected) and expected
    assert outcome.writer is not None and not outcome.writer.quarantined
    assert spark.streams.active == []


def test_a_live_job_stopped_while_its_database_is_down_starts_nothing():
    """Ctrl-C while `fleetwatch run` waits for the database: the run ends there, before Spark or
    any part starts, and the console has nothing to draw (`run_job` then exits 0 in silence)."""
    config = FleetwatchConfig.model_validate({
        "bus": {"bootstrap_servers": "127.0.0.1:9092"},
        "store": {"url": f"postgresql+psycopg://fleetwatch@127.0.0.1:{free_port()}/fleetwatch"}})
    told, stop = Told(), threading.Event()
    stop.set()
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        outcome = JobCoordinator(config, LivePlan(), told, stop).run()
    finally:
        for sig, handler in handlers.items():  # a live job takes SIGINT and SIGTERM: give them back to pytest
            signal.signal(sig, handler)
    assert outcome == Outcome() and told.said == []


class Screen:
    """A console that keeps what it was asked to show."""

    def __init__(self) -> None:
        self.banners: list[tuple[str, Sequence[tuple[str, str]]]] = []
        self.statuses: list[Status] = []

    def banner(self, title: str, rows: Sequence[tuple[str, str]]) -> None:
        self.banners.append((title, rows))

    def status(self, status: Status) -> None:
        self.statuses.append(status)

    def line(self, text: str) -> None:
        pass

    def closing(self, text: str) -> None:
        pass


def test_the_console_draws_the_banner_and_status_line_from_what_the_coordinator_tells_it(tmp_path: Path):
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    screen = Screen()
    view = JobView(screen, lambda wiring: ("the job", [("bus", wiring.bus)]), deliveries_shown=False)
    assert not view.shown
    view.phase("starting Spark")  # before anything opened: nowhere to show it, and no error
    view.opened(Wiring("fleetwatch", "127.0.0.1:9092", False, store, None, lambda: "query restarted once"))
    try:
        assert view.shown and screen.banners == [("the job", [("bus", "127.0.0.1:9092")])]
        view.phase("starting the job")
        shown = view.ticker.tick() if view.ticker is not None else None
        assert shown is not None and (shown.phase, shown.note) == ("starting the job", "query restarted once")
        view.stopping()  # the query never started: the last reading says so, then "stopping"
        assert view.last.phase == "waiting for the first micro-batch" and view.ticker.phase == "stopping"
    finally:
        view.closed()
        store.close()
    assert screen.statuses and screen.statuses[-1] == view.last
