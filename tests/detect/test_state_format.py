"""The detection state's stored format (streaming/detect/state_format.py): the engines of both
passes round trip tagged with the format version, and a format this code cannot continue is
refused with what to do."""

from __future__ import annotations

import gc
import pickle
from typing import Any

import pytest
from support.rule_events import C, D, bk, boot, enumerate_positions, hb, later, t

from streaming.config import RuleBook
from streaming.detect import (
    NEVER_LATE,
    STATE_FORMAT_VERSION,
    HolderShard,
    ShardEngine,
    detect,
    dump_engine,
    engine_for,
    load_engine,
    run_bucket,
    shard_of_handoff,
)
from streaming.detect.misroutes import Advert


def held(engine: ShardEngine | HolderShard) -> dict[str, Any]:
    """What an engine holds, beside its caches."""
    state = {"shard": engine.shard, "last_event_ms": engine.last_event_ms,
             "open": sorted([rule, subject, a.starts_at] for (rule, subject), a in engine.incidents.open.items())}
    if isinstance(engine, HolderShard):
        return {**state, "holders": engine.holders}
    return {**state, "brokers": [b.snapshot() for _, b in sorted(engine.brokers.items())],
            "cluster": engine.cluster.snapshot() if engine.cluster else None,
            "targets": [tt.snapshot() for _, tt in sorted(engine.targets.items())],
            "advertisements": engine.advertisements, "held_id": engine.held_id}


def test_the_engines_of_both_passes_round_trip_tagged_with_the_format_version():
    book = RuleBook()
    events = enumerate_positions([boot(0, "pay", C, "b1:9092", [bk(1, "x1:9092")]),
                                  boot(1, "doc", D, "d1:9092", [bk(5, "x1:9092")]),
                                  hb(t(2), 1, kind="registration", endpoints=["x2:9092"])])
    engines: dict[str, ShardEngine | HolderShard] = {}
    handoffs = []
    for shard in ("cluster:" + C, "target:pay", "cluster:" + D, "target:doc"):
        engine = engines[shard] = engine_for(shard)
        mine = [(p, e) for p, e in events if shard in (f"cluster:{getattr(e, 'cluster_id', None)}",
                                                       f"target:{getattr(e, 'target', None)}")]
        handoffs += engine.process(mine, -(2**62), book).handoffs
    colliding = engines["addr:x1:9092"] = engine_for("addr:x1:9092")
    fired = colliding.process([((), c) for c in handoffs if shard_of_handoff(c) == "addr:x1:9092"], -(2**62), book)
    assert [(a.rule, a.status) for a in fired.alerts] == [("endpoint.collision", "firing"),
                                                          ("endpoint.collision", "resolved")]  # C's 1 moved to x2
    for engine in engines.values():
        data = dump_engine(engine)
        assert data[:5] == b"fwds" + bytes([STATE_FORMAT_VERSION])
        loaded = load_engine(data)
        assert held(loaded) == held(engine)
        assert loaded.next_deadline(book) == engine.next_deadline(book)
    assert engines["cluster:" + C].advertisements.by_node == {1: Advert(frozenset({"x2:9092"}), t(0), listed=False)}


@pytest.mark.parametrize("written", [pickle.dumps(ShardEngine("target:pay")),  # version 1: untagged
                                     b"fwds" + bytes([2]) + pickle.dumps(ShardEngine("target:pay"))])
def test_the_state_of_the_one_stage_job_is_refused_with_what_to_do(written):
    with pytest.raises(ValueError, match="one detection stage: start a new checkpoint"):
        load_engine(written)


def test_a_format_newer_than_this_code_is_refused():
    data = b"fwds" + bytes([STATE_FORMAT_VERSION + 1]) + pickle.dumps(ShardEngine("target:pay"))
    with pytest.raises(ValueError, match="newer fleetwatch"):
        load_engine(data)


def test_detect_keeps_the_engines_in_the_stored_format_between_batches():
    events = [hb(t(0), 1), hb(t(20), 1), boot(21, "pay", C, "b1:9092", [bk(1, "x1:9092")]),
              boot(22, "doc", D, "d1:9092", [bk(5, "x1:9092")]), later(t(40))]
    alerts = detect(events)
    assert {a.rule for a in alerts} >= {"broker.heartbeat_lost", "endpoint.collision"}
    assert detect(events, batch_size=1, pickled=True) == alerts


def test_a_state_written_before_the_records_moved_reads_in_their_new_home():
    """Issue 46 moved `streaming.alert` and `streaming.layout_contract` into streaming/records/; a
    checkpoint written before names the old modules, and the job must go on with it."""
    book = RuleBook()
    engine = engine_for("cluster:" + C)
    engine.process(enumerate_positions([hb(t(0), 1), hb(t(20), 1), later(t(40))]), -(2**62), book)
    assert engine.incidents.open, "a firing alert (an Alert record) is part of the state"
    new = pickle.dumps(engine, protocol=2)  # protocol 2 names each class as text: "c<module>\n<name>\n"
    assert b"cstreaming.records.alert\n" in new
    old = b"fwds" + bytes([STATE_FORMAT_VERSION]) + new.replace(b"cstreaming.records.alert\n", b"cstreaming.alert\n")
    with pytest.raises(ModuleNotFoundError):
        pickle.loads(old[5:])
    assert held(load_engine(old)) == held(engine)


def test_an_engine_its_bucket_ran_and_stored_is_freed_without_the_cycle_collector():
    """A bucket loads and stores every engine it runs, a thousand per micro-batch at 1,000 clusters: each
    goes as soon as the bucket lets go of it (reference counting), not when Python's cycle collector next
    walks the process (the first pass's workers run it paused: streaming/pipeline/state.py)."""
    book = RuleBook()
    shard = "cluster:" + C
    batches = [[boot(0, "pay", C, "b1:9092", [bk(1, "b1:9092"), bk(2, "b2:9092")]), hb(t(1), 1), hb(t(1), 2)],
               [hb(t(3), 1), hb(t(3), 2), boot(4, "pay", C, "b1:9092", [bk(1, "b1:9092"), bk(2, "b2:9092")])]]
    engines: dict = {}
    gc.collect()
    gc.disable()
    try:
        for events in batches:  # a new engine, then one loaded from its stored state
            run_bucket(engines, {shard: enumerate_positions(events)}, NEVER_LATE, NEVER_LATE, book)
        left = [o for o in gc.get_objects() if isinstance(o, ShardEngine)]
    finally:
        gc.enable()
    assert shard in engines
    assert left == []
