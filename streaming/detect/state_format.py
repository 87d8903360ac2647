"""The detection state's stored format: one `ShardEngine` as bytes in the job's state store.

The Spark job keeps each shard's engine pickled in its checkpoint (streaming/pipeline/state.py). Pickle
writes an object's class by module and name and its fields as they are, and a checkpoint
outlives the code that wrote it: every layout ever written is read here, and only here.

- Version 2 on: `_TAG`, one byte of version, then the engine's pickle.
- Version 1 (untagged): a bare pickle, as the job wrote it before this module. Its layouts:
  - written before the state TTL (up to f7ceeaf): no `ShardEngine.last_event_ms` (the shard
    counts as new: its TTL runs from its next event) and no `heard` in the fleet shard's
    `DuplicateRegistry` and `AdvertisementRegistry` (nothing heard of yet);
  - every untagged state names `streaming.detect.routing`, now `streaming.detect.misroutes`;
  - every untagged open incident is a `streaming.detect.alerts.Alert` of twelve fields, now
    `streaming.alert.Alert`, which also holds its `alert_id` and `severity`.
  A field later added to a tracker with a plain default (`BrokerTracker.session_held_since`,
  ...) needs nothing: an object pickled without it reads the class's default.

A layout change that needs more than a class default: bump STATE_FORMAT_VERSION and add the
upgrade from the version before it to `_UPGRADES`. Caches are no part of the format: each class
leaves them out of its pickle (`__getstate__`) and rebuilds them when loaded (`__setstate__`).
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from streaming.alert import Alert
from streaming.detect.forgetting import LastHeard

if TYPE_CHECKING:
    from streaming.detect.engine import ShardEngine

__all__ = ["STATE_FORMAT_VERSION", "dump_engine", "load_engine"]

STATE_FORMAT_VERSION = 2
_TAG = b"fwds"  # never the start of a pickle (protocol 2 on begins with 0x80)
UNTAGGED_VERSION = 1

# Modules renamed since they were pickled: old name -> new name.
_MOVED_MODULES = {"streaming.detect.routing": "streaming.detect.misroutes"}


def dump_engine(engine: ShardEngine) -> bytes:
    return _TAG + bytes([STATE_FORMAT_VERSION]) + pickle.dumps(engine, protocol=pickle.HIGHEST_PROTOCOL)


def load_engine(data: bytes) -> ShardEngine:
    """An engine as `dump_engine` wrote it, or as any earlier version did, in today's layout."""
    if data.startswith(_TAG):
        version, body = data[len(_TAG)], memoryview(data)[len(_TAG) + 1:]
    else:
        version, body = UNTAGGED_VERSION, memoryview(data)
    if version > STATE_FORMAT_VERSION:
        raise ValueError(f"detection state of format {version}, written by a newer fleetwatch "
                         f"(this one reads up to {STATE_FORMAT_VERSION})")
    engine: ShardEngine = _Unpickler(io.BytesIO(body)).load()
    for upgrade in range(version, STATE_FORMAT_VERSION):
        _UPGRADES[upgrade](engine)
    return engine


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("streaming.detect.alerts", "Alert"):
            return _UntaggedAlert
        return super().find_class(_MOVED_MODULES.get(module, module), name)


class _UntaggedAlert:
    """An open incident as version 1 pickled it (a slots dataclass: its fields' values in order),
    held until `_from_untagged` makes it an `Alert`."""

    FIELDS = ("rule", "status", "subject", "cluster_id", "target", "broker_id", "endpoint", "starts_at",
              "ends_at", "summary", "details", "cause")

    def __setstate__(self, state: list[Any]) -> None:
        self.fields = dict(zip(self.FIELDS, state, strict=True))

    def upgraded(self) -> Alert:
        fired = Alert.firing(self.fields["rule"], self.fields["subject"], self.fields["starts_at"],
                             self.fields["summary"], cluster_id=self.fields["cluster_id"],
                             target=self.fields["target"], broker_id=self.fields["broker_id"],
                             endpoint=self.fields["endpoint"], details=self.fields["details"])
        return replace(fired, status=self.fields["status"], ends_at=self.fields["ends_at"],
                       cause=self.fields["cause"])


def _from_untagged(engine: ShardEngine) -> None:
    """Version 1 -> 2: what the layouts before the state TTL lack, and the open incidents as `Alert`s."""
    engine.incidents.open = {key: alert.upgraded() if isinstance(alert, _UntaggedAlert) else alert
                             for key, alert in engine.incidents.open.items()}
    engine.__dict__.setdefault("last_event_ms", None)
    for registry in (engine.duplicates, engine.adverts):
        registry.__dict__.setdefault("heard", LastHeard())


# version -> the upgrade of an engine loaded in that version's layout to the next version's
_UPGRADES: dict[int, Callable[[ShardEngine], None]] = {UNTAGGED_VERSION: _from_untagged}
