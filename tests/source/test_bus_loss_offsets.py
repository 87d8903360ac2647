"""What a batch's Kafka offsets say about the bus (streaming/source/bus_loss.py), for both sources' formats:
the records it lost, and the telemetry topics deleted and back (issue 27). Plain Python: the real
job's lines are checked on a real Kafka bus in test_bus_data_loss.py and test_bus_topic_deleted.py."""

from __future__ import annotations

import json

from streaming.source.bus_loss import MESSAGES_READ, messages_read, planned_records, records_lost, topics_changed

HB, ST = "fleetwatch.heartbeats", "fleetwatch.broker-states"


def test_spark_connector_offsets_a_deleted_topic_leaves_the_end_offsets_and_comes_back():
    both = {HB: {"0": 5, "1": 7}, ST: {"0": 3}}
    without = {ST: {"0": 4}}
    assert topics_changed(json.dumps(both), json.dumps(without)) == ([HB], [])
    assert topics_changed(json.dumps(without), json.dumps(without)) == ([], [])
    assert topics_changed(json.dumps(without), json.dumps({**without, HB: {"0": 2}})) == ([], [HB])
    assert planned_records(json.dumps(both), json.dumps(without)) == 1  # the deleted partitions plan nothing


def test_python_reader_offsets_name_a_gone_topic_which_keeps_its_offsets():
    ids = {"topic_ids": {HB: "a", ST: "b"}}
    before = {f"{HB}:0": 5, f"{ST}:0": 3, **ids}
    gone = {f"{HB}:0": 5, f"{ST}:0": 4, **ids, "gone_topics": [HB]}
    assert topics_changed(before, gone) == ([HB], [])
    assert topics_changed(gone, {**gone, f"{ST}:0": 6}) == ([], [])  # said once, not every batch
    assert planned_records(before, gone) == 1  # the gone topic's offsets planned nothing
    assert records_lost(before, gone, 1) == 0
    back = {f"{HB}:0": 2, f"{ST}:0": 4, "topic_ids": {HB: "c", ST: "b"}}  # created again: another id
    assert topics_changed(gone, back) == ([], [HB])
    assert planned_records(gone, back) == 2  # read from its beginning


def test_offsets_that_are_not_a_kafka_sources_say_nothing():
    assert topics_changed(None, json.dumps({HB: {"0": 1}})) == ([], [])
    assert topics_changed("not json", "[1]") == ([], [])


def test_the_messages_a_batch_read_are_the_graphs_count_where_spark_counts_parsed_rows():
    # The reader that parses as it reads hands Spark one row per state bucket and chunk.
    parsed = {"numInputRows": 17, "observedMetrics": {MESSAGES_READ: {"messages": 5000}}}
    assert messages_read(parsed) == 5000
    assert messages_read({"numInputRows": 17}) == 17  # a query without the count: Spark's rows are messages
    assert messages_read({"numInputRows": 0, "observedMetrics": {MESSAGES_READ: {"messages": None}}}) == 0
    before = {f"{HB}:0": 100, "topic_ids": {HB: "a"}, "planned_ms": 1_795_000_000_000}
    after = {f"{HB}:0": 5100, "topic_ids": {HB: "a"}, "planned_ms": 1_795_000_001_000}
    assert planned_records(before, after) == 5000  # the planning time is no partition
    assert records_lost(before, after, messages_read(parsed)) == 0
