"""Kafka's JVMs start from the class archive `make jars` made (streaming/workshop/kraft/archive.py): the
session's real Kafka node maps it. Without it every format and start loads and verifies Kafka's
classes from the jars again (a 1-node cluster: 7.6 CPU-s, 4.3 with the archive)."""

from __future__ import annotations

import psutil
import pytest

from streaming.workshop.kraft.archive import DEFAULT_BUNDLE, archive_path

pytestmark = [pytest.mark.real_kafka]


def test_the_sessions_kafka_node_maps_the_class_archive_make_made(kafka_node: str) -> None:
    archive = archive_path(DEFAULT_BUNDLE)
    assert archive is not None and archive.is_file(), "make jars makes it: python -m streaming.workshop.kraft archive"
    port = int(kafka_node.rsplit(":", 1)[1])
    (pid,) = {c.pid for c in psutil.net_connections(kind="tcp") if c.laddr and c.laddr.port == port
              and c.status == psutil.CONN_LISTEN}
    assert str(archive) in {m.path for m in psutil.Process(pid).memory_maps()}
