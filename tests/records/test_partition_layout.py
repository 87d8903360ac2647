"""The partition_layout event (issue 30; streaming/detect/README.md "Contract additions"): what it
carries, and every way it is refused (quarantined with a reason, never failing a batch)."""

from __future__ import annotations

import json

import pytest

from streaming.records import topics
from streaming.records.contract import (
    MAX_LAYOUT_PARTITIONS,
    PartitionLayout,
    Rejected,
    event_from_dict,
    event_to_dict,
    parse_message,
    topic_of,
)

TS = 1_764_000_000_000


def layout(**overrides):
    event = {"schema": "fleetwatch.event/v1", "type": "partition_layout", "ts": TS, "source": "probe-1",
             "cluster_id": "MkU3OEVBNTcwNTJENDM2Qg", "target": "pay", "complete": True, "default_min_insync": 1,
             "topics": [{"name": "orders", "min_insync": 2,
                         "partitions": [[0, 1, [1, 2, 3], [1, 2]], [1, -1, [2], []]]}]}
    return {**event, **overrides}


def test_a_layout_is_parsed_and_written_back_the_same():
    event = parse_message(json.dumps(layout()), topics.METADATA)
    assert isinstance(event, PartitionLayout)
    assert event.topics[0].partitions == ((0, 1, (1, 2, 3), (1, 2)), (1, -1, (2,), ()))
    assert event_to_dict(event) == layout()
    assert topic_of("partition_layout") == topics.METADATA


def test_optional_fields_default_to_a_complete_layout_of_unknown_minimums():
    raw = layout()
    del raw["complete"], raw["default_min_insync"], raw["topics"][0]["min_insync"]
    event = event_from_dict(raw)
    assert (event.complete, event.default_min_insync, event.topics[0].min_insync) == (True, None, None)


@pytest.mark.parametrize(("change", "reason"), [
    ({"cluster_id": None}, "missing_cluster_id"),
    ({"topics": None}, "wrong_type:topics"),
    ({"topics": ["orders"]}, "wrong_type:topics[0]"),
    ({"topics": [{"name": "o", "partitions": [[0, 1, [1]]]}]}, "wrong_type:topics[0].partitions"),
    ({"topics": [{"name": "o", "partitions": [[0, 1, [1], [2**31]]]}]}, "out_of_range:topics[0].partitions"),
    ({"topics": [{"name": "o", "partitions": [[0, True, [1], [1]]]}]}, "wrong_type:topics[0].partitions"),
    ({"topics": [{"name": "o" * 256, "partitions": []}]}, "too_long:topics[0].name"),
    ({"topics": [{"name": "o", "min_insync": "2", "partitions": []}]}, "wrong_type:topics[0].min_insync"),
    ({"complete": "yes"}, "wrong_type:complete"),
    ({"target": None}, "wrong_type:target"),
])
def test_bad_layouts_are_refused_with_a_reason(change, reason):
    with pytest.raises(Rejected) as refused:
        event_from_dict(layout(**change))
    assert refused.value.reason == reason


def test_a_layout_over_the_partition_bound_is_refused():
    many = [{"name": f"t{i}", "partitions": [[p, 1, [1], [1]] for p in range(1000)]}
            for i in range(MAX_LAYOUT_PARTITIONS // 1000 + 1)]
    with pytest.raises(Rejected) as refused:
        event_from_dict(layout(topics=many))
    assert refused.value.reason == "too_long:topics"


def test_a_layout_on_another_topic_is_refused():
    with pytest.raises(Rejected) as refused:
        parse_message(json.dumps(layout()), topics.HEARTBEATS)
    assert refused.value.reason == "wrong_topic"
