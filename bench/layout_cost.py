"""What reading a cluster's partition layout costs the probe (issue 30): bytes and milliseconds per
reading of a real Kafka 4.4 cluster holding 10,000 partitions, with DescribeTopicPartitions' cursor
(pages of 2,000 partitions) and with the one-answer Metadata fallback, DescribeConfigs included.

    .venv/bin/python bench/layout_cost.py [--topics 100 --partitions 100 --readings 5]

One broker (combined layout, replication 1): the answers' size depends on the partitions, not on
how many brokers hold them, except for the replica and ISR lists (4 bytes per extra replica and
ISR member each). Prints one line per API: median and max ms, bytes read, requests, partitions, and
the size of the `partition_layout` event that the bus carries.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time

from kafka.admin import KafkaAdminClient, NewTopic

from streaming.collect.probe import LayoutLimits, LayoutReading, Target, layout_event, parse_address, read_layout
from streaming.collect.protocol import Connection
from streaming.workshop.kraft import KRaftCluster


class _NoPages(Connection):
    """A connection that hides DescribeTopicPartitions: the reader takes the Metadata fallback."""

    async def negotiate(self) -> dict[int, tuple[int, int]]:
        table = await super().negotiate()
        self.versions.pop(75, None)
        return table


def _create(bootstrap: str, topics: int, partitions: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=120_000)
    try:
        for start in range(0, topics, 20):  # in batches: one CreateTopics of 10,000 partitions times out here
            batch = range(start, min(topics, start + 20))
            admin.create_topics([NewTopic(f"bench-{i:04d}", partitions, 1) for i in batch], timeout_ms=120_000)
    finally:
        admin.close()


async def _read(target: Target, limits: LayoutLimits, connection: type[Connection]) -> tuple[float, LayoutReading]:
    host, port = target.bootstrap[0]
    begun = time.perf_counter()
    reading = await read_layout(target, host, port, limits, client_id="bench", broker_id=1,
                                connection=connection, max_frame=64 * 1024 * 1024)
    return (time.perf_counter() - begun) * 1000, reading


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--readings", type=int, default=5)
    args = parser.parse_args()
    # The test clusters' 320 MB heap is for a handful of partitions: with 10,000 the broker spent its
    # time collecting garbage (a Metadata answer took 60 s). The JVM reads _JAVA_OPTIONS after its
    # command line, so this -Xmx wins.
    os.environ["_JAVA_OPTIONS"] = "-Xmx2g"
    expected = args.topics * args.partitions
    with tempfile.TemporaryDirectory() as workdir, KRaftCluster(workdir, brokers=1,
                                                                extra={"num.partitions": "1"}) as cluster:
        bootstrap = cluster.bootstrap[0]
        _create(bootstrap, args.topics, args.partitions)
        target = Target("bench", (parse_address(bootstrap),))
        limits = LayoutLimits(max_bytes=256 * 1024 * 1024, timeout_ms=60_000)
        deadline = time.monotonic() + 600
        while True:  # until the broker lists every partition created (creating 10,000 takes minutes here)
            _, reading = asyncio.run(_read(target, limits, Connection))
            count = sum(len(p) for p in reading.topics.values())
            if count >= expected:
                break
            if time.monotonic() > deadline:
                print(f"only {count} of {expected} partitions listed after 600 s", file=sys.stderr)
                return 1
            time.sleep(2)
        for api, connection in (("DescribeTopicPartitions", Connection), ("Metadata", _NoPages)):
            runs = [asyncio.run(_read(target, limits, connection)) for _ in range(args.readings)]
            times, reading = [ms for ms, _ in runs], runs[-1][1]
            count = sum(len(p) for p in reading.topics.values())
            event = json.dumps(layout_event(reading, "c", "bench", 0, "bench"))
            print(f"{api:24} partitions={count} topics={len(reading.topics)} requests={reading.requests} "
                  f"bytes={reading.bytes_read} ms_median={statistics.median(times):.0f} ms_max={max(times):.0f} "
                  f"event_bytes={len(event)} complete={reading.complete} min_isr_read={len(reading.min_isr)} "
                  f"default_min_isr={reading.default_min_isr}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
