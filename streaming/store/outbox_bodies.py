"""An outbox body read back: parsed once, where the notifier's queue reads it (delivery_queue.py),
into the alert it was written from (`Alert.stored_body`) and the object as stored.

Both, because each reader needs one: routes, silences and the receivers' messages read the alert;
a webhook body and PagerDuty's custom details are the object as stored, not the alert written out
again (an older job's object has no names, issue 43, and is sent without them). A body that is no
alert object (not JSON, a field missing, a rule this version does not know) reads as `NotAnAlert`,
saying why: the planner dead-letters its outbox row, and a send of it fails for good.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from streaming.records.alert import Alert

__all__ = ["NotAnAlert", "read_body"]


@dataclass(frozen=True)
class NotAnAlert:
    """Why a stored body is no alert object: its parse's error, `<exception type>: <message>`."""

    why: str


def read_body(body: str) -> tuple[Alert | NotAnAlert, Mapping[str, Any]]:
    """The alert of a stored body (or why it is none) and its object as stored ({} when it is none)."""
    try:
        stored = json.loads(body)
        return Alert.from_dict(stored), stored
    except (ValueError, KeyError, TypeError) as exc:
        return NotAnAlert(f"{type(exc).__name__}: {exc}"), {}
