"""fleetwatch's errors: one base, and the kinds a command can fail of, each with its exit code.

Every exception class of the product derives from `FleetwatchError` (tests/test_house.py checks
it), mostly through one of the kinds below; a stage's own exceptions (the contract's `Rejected`,
the probe's `ProbeFailure`, ...) live in their stage. The `fleetwatch` commands (streaming/cli.py,
`python -m streaming.notify`) turn an error that reaches them into one line on stderr and the
exit code of its kind (`run_command`):

| exit | kind | what went wrong |
|---|---|---|
| 1 | `FleetwatchError` | any other failure of the product (the message is one line) |
| 2 | `ConfigError` | bad configuration or input, already phrased for the user |
| 3 | `StoreFailure` | a store error that waiting will not cure |
| 4 | `BusFailure` | the telemetry bus could not be started, reached, prepared or read |
| 5 | `SetupFailure` | a part the command starts is missing or did not start (Java, Maven, a jar, a Kafka node) |
| 6 | `NotifierBusy` | another notifier holds the store's lease |

130 is Ctrl-C; argparse's usage errors exit with 2 as well.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from streaming.plumbing.redact import redact_text

__all__ = ["BusFailure", "ConfigError", "FleetwatchError", "NotifierBusy", "SetupFailure", "StoreFailure", "first_line",
           "run_command"]


class FleetwatchError(Exception):
    """The base of every error of fleetwatch; `exit_code` is what a command exits with."""

    exit_code = 1


class ConfigError(FleetwatchError):
    """A configuration problem, already phrased as one line for the user."""

    exit_code = 2


class StoreFailure(FleetwatchError, RuntimeError):
    """A store error that waiting will not cure; its message is one line (the cause is chained)."""

    exit_code = 3


class BusFailure(FleetwatchError, RuntimeError):
    """The telemetry bus could not be started, reached, prepared or read."""

    exit_code = 4


class SetupFailure(FleetwatchError):
    """A part the command starts is missing or did not start; the message says which, in one line."""

    exit_code = 5


class NotifierBusy(FleetwatchError):
    """Another notifier holds the store's lease."""

    exit_code = 6


def run_command(command: str, action: Callable[[], int]) -> int:
    """`action()`'s exit code; an error of fleetwatch that ends it is said in one line on stderr, as
    `fleetwatch COMMAND: ...`, and exits with its kind's code; an error of the store met outside
    `retry_store` (SQLAlchemy's) is a `StoreFailure`; Ctrl-C exits with 130."""
    from sqlalchemy.exc import SQLAlchemyError  # loaded with the store anyway; not by every import of this

    try:
        return action()
    except (FleetwatchError, SQLAlchemyError) as exc:
        # The driver's text of a store error can name the database's URL: its password is redacted.
        error = exc if isinstance(exc, FleetwatchError) else StoreFailure(
            f"the store failed: {redact_text(first_line(exc, named=True))}")
        print(f"fleetwatch {command}: {first_line(error)}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        return 130


def first_line(error: BaseException, *, named: bool = False) -> str:
    """An error in one line, the one way fleetwatch says one: the first line of its message (a driver's
    or Spark's spans pages), whole for a command's error (its class's name when it says nothing), or
    `named`, as a log field: after its class's name, at most 300 characters."""
    lines = str(error).strip().splitlines()
    text = lines[0] if lines else ""
    if named:
        return f"{type(error).__name__}: {text[:300]}"
    return text or type(error).__name__
