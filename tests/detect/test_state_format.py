"""The detection state's stored format (streaming/detect/state_format.py): today's engines round
trip, and state written before the format was tagged, in each of its layouts, loads in today's."""

from __future__ import annotations

import base64
import json
import pickle
from pathlib import Path
from typing import Any

import pytest
from support.rule_events import C, bk, boot, enumerate_positions, hb, later, t

from streaming.config import RuleBook
from streaming.detect import STATE_FORMAT_VERSION, ShardEngine, detect, dump_engine, load_engine
from streaming.detect.forgetting import LastHeard

UNTAGGED = json.loads((Path(__file__).parent.parent / "fixtures" / "detect_state" / "untagged_engines.json")
                      .read_text(encoding="utf-8"))


def held(engine: ShardEngine) -> dict[str, Any]:
    """What an engine holds, as tests/fixtures/detect_state recorded it."""
    return {
        "shard": engine.shard,
        "last_event_ms": engine.last_event_ms,
        "open": sorted([rule, subject, alert.starts_at] for (rule, subject), alert in engine.incidents.open.items()),
        "brokers": [b.snapshot() for _, b in sorted(engine.brokers.items())],
        "cluster": engine.cluster.snapshot() if engine.cluster else None,
        "targets": [tt.snapshot() for _, tt in sorted(engine.targets.items())],
        "held_by": dict(sorted(engine.duplicates.held_by.items())),
        "adverts": sorted([c, n, sorted(a)] for (c, n), a in engine.adverts.adverts.items()),
    }


def jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value))


@pytest.mark.parametrize("stored", UNTAGGED, ids=[f"{s['written_by'].split()[0]} {s['expect']['shard']}"
                                                  for s in UNTAGGED])
def test_untagged_state_loads_in_todays_layout(stored):
    engine = load_engine(base64.b64decode(stored["state"]))
    assert isinstance(engine, ShardEngine)
    assert jsonable(held(engine)) == stored["expect"]
    # What the layouts before the state TTL lacked is there: nothing heard of yet, no TTL running.
    assert isinstance(engine.duplicates.heard, LastHeard) and isinstance(engine.adverts.heard, LastHeard)
    assert engine.cluster_id == engine.shard.removeprefix("cluster:")
    # It goes on: the watermark fires what fell due (each open alert's resolution or more), and
    # it comes back from its own format the same.
    book = RuleBook()
    engine.advance(stored["watermark"] + 1, book)
    again = load_engine(dump_engine(engine))
    assert held(again) == held(engine)
    assert again.next_deadline(book) == engine.next_deadline(book)


def test_the_fixtures_cover_each_untagged_layout():
    layouts = {(s["written_by"].split()[0], s["expect"]["shard"].split(":")[0]) for s in UNTAGGED}
    assert layouts == {(w, kind) for w in ("4b74eb1", "f7ceeaf") for kind in ("cluster", "target", "fleet")}
    assert any(s["expect"]["open"] for s in UNTAGGED if s["expect"]["shard"].startswith("cluster:"))
    assert any(s["expect"]["open"] for s in UNTAGGED if s["expect"]["shard"].startswith("target:"))
    assert all(s["expect"]["last_event_ms"] is None for s in UNTAGGED if s["written_by"].startswith("f7ceeaf"))


def test_an_engine_round_trips_tagged_with_the_format_version():
    engine = ShardEngine("fleet")
    engine.process(enumerate_positions([boot(0, "pay", C, "b1:9092", [bk(1, "x1:9092")]),
                                        hb(t(1), 1, kind="registration", endpoints=["x1:9092"])]), -(2**62), RuleBook())
    data = dump_engine(engine)
    assert data[:5] == b"fwds" + bytes([STATE_FORMAT_VERSION])
    loaded = load_engine(data)
    assert held(loaded) == held(engine)
    assert loaded.adverts.heard == engine.adverts.heard and loaded.last_event_ms == engine.last_event_ms


def test_a_format_newer_than_this_code_is_refused():
    data = b"fwds" + bytes([STATE_FORMAT_VERSION + 1]) + pickle.dumps(ShardEngine("fleet"))
    with pytest.raises(ValueError, match="newer fleetwatch"):
        load_engine(data)


def test_detect_keeps_the_engines_in_the_stored_format_between_batches():
    events = [hb(t(0), 1), hb(t(20), 1), later(t(40))]
    assert detect(events, batch_size=1, pickled=True) == detect(events)
