"""The detection stage: telemetry events in, alerts and state rows out, in event time.

Its interface, as the pipeline (streaming/pipeline/) and the others use it:

- `shards_of(event)` names the first-pass shards an event feeds (a cluster's, a target's); the
  job routes each event to them, with its `Position` in the input ((source, offset)).
- `redundant_heartbeats(events, max_gap_ms)`: the heartbeats of a chunk that no rule can tell
  from their neighbours; the job drops them before they reach any shard (thinning.py).
- `ShardEngine(shard)` holds one shard's state: `process(events, watermark, book)` applies a
  micro-batch of its events after the timers the watermark passed, `advance(watermark, book)`
  fires only the timers; both return a `ShardOutput` (alerts, late events, the state store's
  rows). `next_deadline(book)` is when the shard must wake up with no event, and
  `forgotten(watermark, book)` says when the job drops its state (state TTL, forgetting.py).
- `dump_engine(engine)` / `load_engine(data)`: an engine as bytes for the checkpoint's state
  store, in the format STATE_FORMAT_VERSION; the formats of the two-pass job before it (3 on) load,
  those of the one-stage job are refused in one line (state_format.py).
- `ReadPositions` follows the offsets the job reads per bus partition; `advance(runs)` says where
  records were lost unread (`BusGap`s), which `ShardEngine.process` takes among its events: a
  broker session restarts at a gap's end instead of lapsing in the blind time (bus_gaps.py).
- `BusClock` is detection's own watermark: the event time every bus partition has been read to,
  so that a micro-batch cut by the source's cap (a restart onto a backlog) changes no alert and
  makes no event late (bus_clock.py); `advance(runs, cap, lateness_ms)` after each micro-batch.
- `is_carried_over(starts_at, evidence_since)`, `carried_over_ends(carried, fired, snapshots)`:
  which alerts open before a reset of the detection state outlive it, and when the new state ends
  them (carried.py).
- A bucket of shards over one micro-batch, as both passes run it: `run_bucket(engines, by_shard,
  before, after, book)` over `BucketEngines` (pickled engines beside their deadlines), `output_rows`
  of its outputs (buckets.py).
- `SecondPass`: the second pass, which the job's driver runs over each micro-batch's output rows
  (the address, cluster-id and collector shards over the first pass's hand-offs, `handoff_rows`),
  its state carried from batch to batch and kept in the store by the live job (second_pass.py).
- `detect(events, book)`: the same engines over a list of events, cut into micro-batches as
  the job does, for replays in tests and benchmarks.
- `group_incidents(alerts, places, rules)`: fleet incidents, alerts of several clusters that start
  within a window and share a failure domain (`ClusterPlace`, `BrokerPlace`, `Domain`, `places_of`:
  domains.py; incidents.py). Plain data; the notifier, /metrics, the dashboard and the bench use it.
- The alerts it fires are `streaming.records.alert.Alert` records (SPEC section 4), the rule table is
  `streaming.records.alert.RULES`; alerts.py keeps the bookkeeping of open incidents.

The rules themselves (README.md beside this file) are plain Python over contract records:
`RuleBook` (streaming.config) gives their settings, nothing here knows about Spark.
"""


from streaming.detect.buckets import NEVER_LATE, BucketEngines, ShardItems, output_rows, run_bucket
from streaming.detect.bus_clock import BusClock
from streaming.detect.bus_gaps import BusGap, ReadPositions, Run
from streaming.detect.carried import carried_over_ends, is_carried_over
from streaming.detect.domains import BrokerPlace, ClusterPlace, Domain, places_of
from streaming.detect.engine import ShardEngine
from streaming.detect.holder_shard import HolderShard
from streaming.detect.identity import HeldId
from streaming.detect.in_batches import detect
from streaming.detect.incidents import (
    FleetIncident,
    GroupingRules,
    alert_domains,
    cluster_key,
    evidence,
    group_incidents,
)
from streaming.detect.misroutes import Advertisements
from streaming.detect.observers import CollectorSilence
from streaming.detect.routing import EVERY_SHARD, engine_for, shard_of_handoff, shards_of
from streaming.detect.second_pass import SecondPass, handoff_rows
from streaming.detect.shard_output import Handoff, Position, ShardOutput
from streaming.detect.state_format import STATE_FORMAT_VERSION, dump_engine, load_engine
from streaming.detect.thinning import redundant_heartbeats

__all__ = [
    "EVERY_SHARD",
    "NEVER_LATE",
    "STATE_FORMAT_VERSION",
    "Advertisements",
    "BrokerPlace",
    "BucketEngines",
    "BusClock",
    "BusGap",
    "ClusterPlace",
    "CollectorSilence",
    "Domain",
    "FleetIncident",
    "GroupingRules",
    "Handoff",
    "HeldId",
    "HolderShard",
    "Position",
    "ReadPositions",
    "Run",
    "SecondPass",
    "ShardEngine",
    "ShardItems",
    "ShardOutput",
    "alert_domains",
    "carried_over_ends",
    "cluster_key",
    "detect",
    "dump_engine",
    "engine_for",
    "evidence",
    "group_incidents",
    "handoff_rows",
    "is_carried_over",
    "load_engine",
    "output_rows",
    "places_of",
    "redundant_heartbeats",
    "run_bucket",
    "shard_of_handoff",
    "shards_of",
]
