"""The detection stage: telemetry events in, alerts and state rows out, in event time.

Its interface, as the pipeline (streaming/pipeline/) and the others use it:

- `shards_of(event)` names the shards an event feeds (a cluster's, a target's, the fleet's);
  the job routes each event to them, with its `Position` in the input ((source, offset)).
- `redundant_heartbeats(events, max_gap_ms)`: the heartbeats of a chunk that no rule can tell
  from their neighbours; the job drops them before they reach any shard (thinning.py).
- `ShardEngine(shard)` holds one shard's state: `process(events, watermark, book)` applies a
  micro-batch of its events after the timers the watermark passed, `advance(watermark, book)`
  fires only the timers; both return a `ShardOutput` (alerts, late events, the state store's
  rows). `next_deadline(book)` is when the shard must wake up with no event, and
  `forgotten(watermark, book)` says when the job drops its state (state TTL, forgetting.py).
- `dump_engine(engine)` / `load_engine(data)`: an engine as bytes for the checkpoint's state
  store, in the format STATE_FORMAT_VERSION; every earlier format loads (state_format.py).
- `detect(events, book)`: the same engines over a list of events, cut into micro-batches as
  the job does, for replays in tests and benchmarks.
- `Alert`, `RULES` (rule -> severity, subject kind), `alert_id`, `ALERT_SCHEMA`: the alert
  records (SPEC section 4).

The rules themselves (README.md beside this file) are plain Python over contract records:
`RuleBook` (streaming.config) gives their settings, nothing here knows about Spark.

Names are loaded on first use: streaming.config reads the rule table from `alerts`, and the
engine reads its settings from streaming.config, so importing them all here would be a cycle.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streaming.detect.alerts import ALERT_SCHEMA, RULES, Alert, alert_id
    from streaming.detect.engine import FLEET_SHARD, Position, ShardEngine, ShardOutput, detect, shards_of
    from streaming.detect.state_format import STATE_FORMAT_VERSION, dump_engine, load_engine
    from streaming.detect.thinning import redundant_heartbeats

__all__ = [
    "ALERT_SCHEMA",
    "FLEET_SHARD",
    "RULES",
    "STATE_FORMAT_VERSION",
    "Alert",
    "Position",
    "ShardEngine",
    "ShardOutput",
    "alert_id",
    "detect",
    "dump_engine",
    "load_engine",
    "redundant_heartbeats",
    "shards_of",
]

_HOME = {
    **dict.fromkeys(("ALERT_SCHEMA", "RULES", "Alert", "alert_id"), "alerts"),
    **dict.fromkeys(("FLEET_SHARD", "Position", "ShardEngine", "ShardOutput", "detect", "shards_of"), "engine"),
    **dict.fromkeys(("STATE_FORMAT_VERSION", "dump_engine", "load_engine"), "state_format"),
    "redundant_heartbeats": "thinning",
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    globals()[name] = value
    return value
