"""`check_list_offsets` on a real Tansu bus (no Spark): how it answers ListOffsets(LATEST) is found
out by behaviour, on an empty bus, without touching the telemetry topics. Real Kafka's answer is
checked in tests/source/test_spark_kafka_source.py, beside its bus."""

from __future__ import annotations

import pytest
from kafka import KafkaAdminClient

from streaming.bus import EmbeddedBus, check_list_offsets
from streaming.bus.listoffsets import MARKER_RECORDS
from streaming.records import topics

pytestmark = [pytest.mark.broker]


def test_a_tansu_bus_answers_inside_the_last_batch_and_is_found_out(tmp_path):
    with EmbeddedBus(topics=(), log_path=tmp_path / "tansu.log") as bus:  # empty: not even our topics
        check = check_list_offsets(bus.bootstrap, timeout_s=20)
        print(f"\nListOffsets check on Tansu: {check.took_s:.3f} s")
        assert check.verdict is False, check
        assert check.acked_end == MARKER_RECORDS and check.listed is not None and check.listed < check.acked_end
        assert "Tansu-like" in check.reason and "\n" not in check.reason
        admin = KafkaAdminClient(bootstrap_servers=bus.bootstrap)
        try:
            assert set(admin.list_topics()) == {topics.LISTOFFSETS_CHECK}  # the telemetry topics untouched
        finally:
            admin.close()
        # Kept for the process: the second ask writes nothing.
        assert check_list_offsets(bus.bootstrap, timeout_s=20) is check
        fresh = check_list_offsets(bus.bootstrap, timeout_s=20, cached=False)
        assert fresh.verdict is False and fresh.acked_end == 2 * MARKER_RECORDS


def test_a_bus_nobody_listens_on_cannot_be_told(tmp_path):
    from streaming.plumbing.ports import free_port

    check = check_list_offsets(f"127.0.0.1:{free_port()}", timeout_s=2)
    assert check.verdict is None and check.error and "\n" not in check.reason
