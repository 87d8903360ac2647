"""The fleet's state rows, from the pipeline's output rows (`StateRow.output`) through the job's writer
to a real store: one row per broker, cluster and target, the most recent of a micro-batch, whatever
order the batch's partitions brought them in."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select
from support.micro_batch import MicroBatch

from streaming.records.job_output import Kind, StateRow, compact_json, mark_row
from streaming.sinks import BatchWriter
from streaming.store import Store, brokers, clusters, targets

T0 = 1_790_000_000_000


def _broker(cluster_id: str, broker_id: int, state: str, at: int) -> dict:
    return {"cluster_id": cluster_id, "broker_id": broker_id, "state": state, "fenced": False,
            "broker_epoch": 7, "last_heartbeat_ms": at, "last_answer_ms": at, "rack": None,
            "endpoints": [f"b{broker_id}:9092"], "updated_ms": at}


def _cluster(cluster_id: str, controller_id: int, at: int) -> dict:
    return {"cluster_id": cluster_id, "target": f"tgt-{cluster_id}", "controller_id": controller_id,
            "last_response_ms": at, "updated_ms": at}


def _target(target: str, cluster_id: str, at: int) -> dict:
    return {"target": target, "pinned_cluster_id": cluster_id, "last_cluster_id": cluster_id, "last_ok_ms": at,
            "last_error": None, "last_error_ms": None, "updated_ms": at}


def test_the_latest_snapshot_of_each_key_is_stored(store_url):
    snapshots = [
        (Kind.BROKER, _broker("c1", 1, "FENCED", T0 + 2000)),  # a later partition's row first
        (Kind.BROKER, _broker("c1", 1, "RUNNING", T0 + 1000)),
        (Kind.BROKER, _broker("c1", 2, "RUNNING", T0 + 1000)),
        (Kind.BROKER, _broker("c2", 1, "RUNNING", T0 + 1000)),  # same broker id, another cluster
        ("cluster", _cluster("c1", 1, T0 + 1000)),
        ("cluster", _cluster("c1", 2, T0 + 1000)),  # a tie: the later row wins
        ("target", _target("tgt-c1", "c1", T0 + 3000)),
        ("target", _target("tgt-c1", "c1", T0 + 500)),
    ]
    rows = [StateRow.of(kind, snapshot).output() for kind, snapshot in snapshots]
    rows.append(mark_row(Kind.WATERMARK, T0 + 5000))
    store = Store(store_url)
    BatchWriter(store)(MicroBatch(rows), 0)
    with store.engine.connect() as conn:
        stored_brokers = {(r.cluster_id, r.broker_id): (r.state, r.updated_ms) for r in conn.execute(select(brokers))}
        stored_clusters = [(r.cluster_id, r.controller_id) for r in conn.execute(select(clusters))]
        stored_targets = [(r.target, r.updated_ms) for r in conn.execute(select(targets))]
    store.close()
    assert stored_brokers == {("c1", 1): ("FENCED", T0 + 2000), ("c1", 2): ("RUNNING", T0 + 1000),
                              ("c2", 1): ("RUNNING", T0 + 1000)}
    assert stored_clusters == [("c1", 2)]
    assert stored_targets == [("tgt-c1", T0 + 3000)]


@pytest.mark.parametrize("value", [
    _broker("Zx-é\u2603\"\\", 3, "RUNNING", T0),  # non-ASCII, quote and backslash escaped as json.dumps does
    ["cid", 7], [None, -1], "plain", None, 0.1, {2: "int key", None: "null key", False: "bool key"},
    {"ts": T0, "lead": 1.5, "nan": float("nan"), "inf": float("-inf"), "nested": [{}, [], True]},
])
def test_compact_json_writes_the_text_json_dumps_writes(value):
    # The payloads the store and the replay output keep must not change by a byte.
    assert compact_json(value) == json.dumps(value, separators=(",", ":"))


def test_compact_json_refuses_what_json_dumps_refuses():
    with pytest.raises(TypeError, match="not JSON serializable"):
        compact_json({"at": object()})
