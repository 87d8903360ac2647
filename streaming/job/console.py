"""What `fleetwatch demo` and `fleetwatch run` show a person at a terminal.

On a terminal (and without `--verbose`): a short banner, then one status line redrawn in place
(batches, events/s, lag, firing alerts, deliveries), and one closing line. Every log record,
including what Spark's JVM, its Python workers and the dashboard print, goes to a log file as
JSON lines. Otherwise (stdout not a terminal, or `--verbose`): JSON log lines on stderr, as
every other command writes them; the banner and the closing line are log records too.

The status line is read once a second from the job's progress recorder and the store. `JobView`
is the console as the observer of a job's coordinator (streaming.job): told what opened, what the
start is doing and when the query runs, it draws the banner and the status line.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from sqlalchemy.exc import SQLAlchemyError

from streaming.plumbing.logs import capture_stdio, setup_logging
from streaming.store import Store, status_counts

if TYPE_CHECKING:
    from streaming.job.progress import ProgressRecorder

__all__ = ["Console", "JobView", "LogConsole", "Status", "StatusReader", "StatusTicker", "TerminalConsole",
           "duration_text", "open_console", "plural", "rate_per_s", "render_banner", "render_status"]

log = logging.getLogger(__name__)

_CLEAR_LINE = "\r\x1b[K"  # back to column 0, erase to the end of the line
_RATE_WINDOW_S = 10.0


@dataclass(frozen=True)
class Status:
    elapsed_s: float
    batches: int = 0
    events_per_s: float | None = None
    lag_s: float | None = None
    firing: int = 0
    alerts_seen: int = 0  # firing or resolved since the store was created
    delivered: int | None = None  # None: no notifier runs, the line leaves deliveries out
    failing: int = 0
    phase: str | None = None  # what is happening before the first micro-batch
    note: str | None = None  # e.g. the real Kafka cluster's state


def duration_text(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {nouns or noun + 's'}"


def render_status(status: Status, width: int) -> str:
    """One line, never wider than `width` - 1 (a line that wraps cannot be redrawn in place)."""
    parts = [duration_text(status.elapsed_s)]
    if status.phase is not None:
        parts.append(status.phase)
    else:
        parts.append(plural(status.batches, "batch", "batches"))
        parts.append("-- events/s" if status.events_per_s is None else f"{status.events_per_s:,.0f} events/s")
        parts.append("lag --" if status.lag_s is None else f"lag {status.lag_s:.1f} s")
        parts.append(f"{plural(status.firing, 'alert')} firing")
        if status.delivered is not None:
            parts.append(f"{status.delivered} delivered" + (f", {status.failing} failing" if status.failing else ""))
    if status.note:
        parts.append(status.note)
    line = " | ".join(parts)
    limit = max(width - 1, 10)
    return line if len(line) <= limit else line[: limit - 3] + "..."


def render_banner(title: str, rows: Sequence[tuple[str, str]]) -> list[str]:
    width = max((len(label) for label, _ in rows), default=0)
    return [title, *(f"  {label.ljust(width)}  {value}" for label, value in rows)]


def rate_per_s(samples: Sequence[tuple[float, int]]) -> float | None:
    """Rows per second between the oldest and the newest (time, cumulative rows) sample."""
    if len(samples) < 2 or samples[-1][0] <= samples[0][0]:
        return None
    (t0, n0), (t1, n1) = samples[0], samples[-1]
    return (n1 - n0) / (t1 - t0)


class StatusReader:
    """Builds the status line's numbers: the recorder's counters and the store's alerts and deliveries."""

    def __init__(self, store: Store, recorder: ProgressRecorder | None, query: str, *,
                 deliveries_shown: bool, started: float | None = None) -> None:
        self.store = store
        self.recorder = recorder
        self.query = query
        self.deliveries_shown = deliveries_shown
        self.started = time.monotonic() if started is None else started
        self._samples: deque[tuple[float, int]] = deque()

    def read(self, *, phase: str | None = None, note: str | None = None) -> Status:
        now = time.monotonic()
        stats = self.recorder.stats.get(self.query) if self.recorder is not None else None
        if stats is None or stats.batches == 0:
            return Status(now - self.started, phase=phase or "waiting for the first micro-batch", note=note)
        self._samples.append((now, stats.input_rows))
        while len(self._samples) > 2 and now - self._samples[1][0] >= _RATE_WINDOW_S:
            self._samples.popleft()
        lag = None if stats.max_event_ms is None else max(0.0, time.time() - stats.max_event_ms / 1000)
        counts = status_counts(self.store)
        delivered, failing = counts.delivered, counts.failing
        return Status(now - self.started, stats.batches, rate_per_s(self._samples), lag, counts.firing, counts.alerts,
                      delivered if self.deliveries_shown or delivered or failing else None, failing, phase, note)


class Console(Protocol):
    def banner(self, title: str, rows: Sequence[tuple[str, str]]) -> None: ...

    def status(self, status: Status) -> None: ...

    def line(self, text: str) -> None: ...

    def closing(self, text: str) -> None: ...


class TerminalConsole:
    """Writes to the terminal the process started on (its fds 1 and 2 lead into the log meanwhile)."""

    def __init__(self, tty: TextIO) -> None:
        self._tty = tty
        self._lock = threading.Lock()  # the status ticker's thread and the main thread both write

    def _width(self) -> int:
        try:
            return os.get_terminal_size(self._tty.fileno()).columns
        except OSError:
            return shutil.get_terminal_size().columns

    def _write(self, text: str) -> None:
        with self._lock:
            try:
                self._tty.write(text)
                self._tty.flush()
            except OSError:  # the terminal went away (hang-up): the log still has everything
                pass

    def banner(self, title: str, rows: Sequence[tuple[str, str]]) -> None:
        self._write("".join(f"{line}\n" for line in render_banner(title, rows)))
        log.info(title, extra=dict(rows))

    def status(self, status: Status) -> None:
        self._write(_CLEAR_LINE + render_status(status, self._width()))

    def line(self, text: str) -> None:
        """A line that stays (above the status line, which the next `status` redraws)."""
        self._write(_CLEAR_LINE + text + "\n")
        log.info(text)

    def closing(self, text: str) -> None:
        self.line(text)


class LogConsole:
    """No terminal (or `--verbose`): the banner and the closing line are log records; no status line."""

    def banner(self, title: str, rows: Sequence[tuple[str, str]]) -> None:
        log.info(title, extra=dict(rows))

    def status(self, status: Status) -> None:
        pass  # every micro-batch already logs its progress

    def line(self, text: str) -> None:
        log.info(text)

    def closing(self, text: str) -> None:
        log.info(text)


class StatusTicker:
    """Redraws the status line once a second in a thread; the caller sets `phase` as it starts things."""

    def __init__(self, console: Console, reader: StatusReader, note: Callable[[], str | None] = lambda: None,
                 interval_s: float = 1.0) -> None:
        self.console = console
        self.reader = reader
        self.phase: str | None = "starting"
        self.last = Status(0.0, phase=self.phase)
        self._note = note
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="status-line", daemon=True)

    def start(self) -> StatusTicker:
        self._thread.start()
        return self

    def tick(self) -> Status:
        try:
            self.last = self.reader.read(phase=self.phase, note=self._note())
        except SQLAlchemyError as exc:  # a busy store: keep the last numbers, try again next second
            log.debug("status line not refreshed", extra={"error": str(exc)})
            self.last = replace(self.last, elapsed_s=time.monotonic() - self.reader.started, phase=self.phase)
        self.console.status(self.last)
        return self.last

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.tick()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


class OpenedParts(Protocol):
    """What a job's coordinator says is open before Spark starts (streaming.job.Wiring), as read here."""

    query: str
    store: Store
    note: Callable[[], str | None]


class StartedQuery(Protocol):
    """A query the coordinator started (streaming.job.RunningQuery), as read here."""

    recorder: ProgressRecorder


class JobView:
    """The console as the observer of a job's coordinator (streaming.job.JobObserver). `banner`
    makes the banner's title and rows from what opened; `last` is the status when the query stopped."""

    def __init__(self, console: Console, banner: Callable[[Any], tuple[str, Sequence[tuple[str, str]]]], *,
                 deliveries_shown: bool) -> None:
        self.console = console
        self._banner = banner
        self._deliveries_shown = deliveries_shown
        self.ticker: StatusTicker | None = None
        self.last = Status(0.0, phase="starting")

    @property
    def shown(self) -> bool:
        """Whether the job got as far as its banner (its store opened)."""
        return self.ticker is not None

    def opened(self, wiring: OpenedParts) -> None:
        self.console.banner(*self._banner(wiring))
        reader = StatusReader(wiring.store, None, wiring.query, deliveries_shown=self._deliveries_shown)
        self.ticker = StatusTicker(self.console, reader, note=wiring.note).start()

    def phase(self, text: str | None) -> None:
        if self.ticker is not None:
            self.ticker.phase = text

    def started(self, job: StartedQuery) -> None:
        if self.ticker is not None:
            self.ticker.reader.recorder = job.recorder

    def stopping(self) -> None:
        """The last reading, for the closing line; the line says "stopping" while the parts stop."""
        if self.ticker is None:
            return
        self.ticker.phase = None
        with contextlib.suppress(Exception):  # the closing line is said with the last numbers read
            self.ticker.tick()
        self.last = self.ticker.last
        self.ticker.phase = "stopping"

    def closed(self) -> None:
        if self.ticker is not None:
            self.ticker.stop()


@contextmanager
def open_console(log_path: Path, *, verbose: bool) -> Iterator[TerminalConsole | LogConsole]:
    """The console for a long-running command, with every process it starts logging as JSON lines.

    On a terminal without `verbose`, the log lines go to `log_path` and the console to the
    terminal. Call it before starting Spark or any child process: they inherit fds 1 and 2,
    which lead into the log for the whole block. Logging stays where it was sent after the block.
    """
    if os.isatty(1) and not verbose:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        setup_logging(stream=open(log_path, "a", buffering=1, encoding="utf-8"))  # noqa: SIM115 - for the process
        console: TerminalConsole | LogConsole = TerminalConsole(os.fdopen(os.dup(1), "w", encoding="utf-8"))
    else:
        # Our own stderr, before fd 2 is redirected into the pipe whose lines end up here.
        setup_logging(stream=os.fdopen(os.dup(2), "w", buffering=1, encoding="utf-8"))
        console = LogConsole()
    with capture_stdio("spark"):
        yield console
