"""Structured logs: one JSON object per line, with the `extra=` fields of each call.

Processes fleetwatch starts (Spark's JVM and its Python workers, the dashboard's gunicorn) write
plain text to their stdout and stderr. `LogPipe` and `capture_stdio` turn each of their lines
into a log record of its own (level and logger read from the line where it says them), so
everything fleetwatch prints is one stream of JSON lines, wherever it goes.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TextIO

__all__ = ["ForeignLine", "JsonFormatter", "LogPipe", "capture_stdio", "group_lines", "parse_line", "setup_logging"]

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update({k: v for k, v in record.__dict__.items() if k not in _STANDARD})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def setup_logging(level: str = "INFO", stream: TextIO | None = None) -> None:
    """JSON lines to `stream` (default: stderr), replacing the root logger's handlers."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # py4j chatters at INFO on every call into the JVM.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    logging.getLogger("kafka").setLevel(logging.WARNING)


# -- other processes' plain-text output ---------------------------------------------------------

_LEVELS = {"TRACE": logging.DEBUG, "DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING,
           "WARNING": logging.WARNING, "ERROR": logging.ERROR, "FATAL": logging.CRITICAL,
           "CRITICAL": logging.CRITICAL}
# Spark's log4j default pattern: `25/11/24 03:50:13 WARN Utils: message`.
_LOG4J = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (?P<level>[A-Z]+) (?P<logger>[\w$.-]+): (?P<msg>.*)$", re.DOTALL)
# gunicorn: `[2026-11-25 03:52:28 +0000] [123] [INFO] Starting gunicorn 23.0.0`.
_GUNICORN = re.compile(r"^\[[^\]]*\] \[\d+\] \[(?P<level>[A-Z]+)\] (?P<msg>.*)$", re.DOTALL)
# The JVM's own warnings (`WARNING: Using incubator modules ...`) and Python's (`...: FutureWarning: ...`).
_PREFIXED = re.compile(r"^(?P<level>WARNING|ERROR):\s+(?P<msg>.*)$", re.DOTALL)
_PY_WARNING = re.compile(r"^\S+:\d+: \w*Warning: ")
_ERROR = re.compile(r"^(Traceback \(most recent call last\)|Exception in thread |[\w.]*(Error|Exception)(:|$))")


@dataclass(frozen=True)
class ForeignLine:
    level: int
    logger: str
    msg: str


def parse_line(text: str, source: str) -> ForeignLine:
    """The level, logger and message of one line (or grouped lines) another process wrote.

    `source` names the stream (`spark`, `dashboard`); a log4j line's logger is `<source>.<Class>`.
    A line that says no level is INFO, unless it starts a Python traceback or names an exception.
    """
    if (m := _LOG4J.match(text)) and m["level"] in _LEVELS:
        return ForeignLine(_LEVELS[m["level"]], f"{source}.{m['logger']}", m["msg"])
    if (m := _GUNICORN.match(text)) and m["level"] in _LEVELS:
        return ForeignLine(_LEVELS[m["level"]], source, m["msg"])
    if m := _PREFIXED.match(text):
        return ForeignLine(_LEVELS[m["level"]], source, m["msg"])
    if _PY_WARNING.match(text):
        return ForeignLine(logging.WARNING, source, text)
    if _ERROR.match(text):
        return ForeignLine(logging.ERROR, source, text)
    return ForeignLine(logging.INFO, source, text)


def _continues(line: str) -> bool:
    # Stack frames (`\tat ...`, `  File ...`), `Caused by:` and `... 12 more` belong to the line above.
    return line[:1] in (" ", "\t") or line.startswith(("Caused by:", "..."))


def group_lines(lines: list[str]) -> list[str]:
    """Joins each Java or Python stack trace into one entry with the line that started it.

    A Python traceback ends with its first unindented line (`ValueError: ...`), which it keeps.
    Empty lines are dropped.
    """
    entries: list[str] = []
    in_traceback = False
    for line in lines:
        if not line.strip():
            continue
        if entries and (_continues(line) or in_traceback):
            entries[-1] += "\n" + line
            in_traceback = _continues(line) and in_traceback
            continue
        entries.append(line)
        in_traceback = line.startswith("Traceback (most recent call last)")
    return entries


class LogPipe:
    """A pipe whose write end (`fd`) a child process writes to; each line it writes becomes a record.

    A reader thread logs the lines under the logger `source` (see `parse_line`). Lines of a stack
    trace that arrive in one read are logged as one record.
    """

    def __init__(self, source: str) -> None:
        self.source = source
        self._read_fd, self.fd = os.pipe()
        self._thread = threading.Thread(target=self._pump, name=f"log-pipe-{source}", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        pending = b""
        with os.fdopen(self._read_fd, "rb", buffering=0) as pipe:
            while chunk := pipe.read(65536):
                *complete, pending = (pending + chunk).split(b"\n")
                self._emit(complete)
        self._emit([pending])

    def _emit(self, raw: list[bytes]) -> None:
        lines = [line.decode(errors="replace").rstrip("\r") for line in raw]
        for entry in group_lines(lines):
            parsed = parse_line(entry, self.source)
            logging.getLogger(parsed.logger).log(parsed.level, parsed.msg)

    def close_write_end(self) -> None:
        """Our copy of the write end; the reader ends once every child holding it has exited too."""
        os.close(self.fd)


@contextmanager
def capture_stdio(source: str) -> Iterator[None]:
    """Within the block, this process's fds 1 and 2 (inherited by every process it starts meanwhile)
    lead into a `LogPipe`. The root logger's handler must write elsewhere (see `setup_logging`).
    """
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = os.dup(1), os.dup(2)
    pipe = LogPipe(source)
    os.dup2(pipe.fd, 1)
    os.dup2(pipe.fd, 2)
    pipe.close_write_end()
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        for fd, original in zip((1, 2), saved, strict=True):
            os.dup2(original, fd)
            os.close(original)
