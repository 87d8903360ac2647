"""The kafka-python consumers of the `fleetwatch_kafka` source: the one way they are configured, and
the consumer each executor Python worker keeps between tasks."""

from __future__ import annotations

import contextlib
from typing import Any

from kafka import KafkaConsumer
from kafka.errors import KafkaError

from streaming.source.kafka_options import SHORT_NAME, KafkaReaderOptions, KafkaSourceError

__all__ = ["drop_executor_consumer", "executor_consumer", "new_consumer"]


# One consumer per executor Python worker, kept between tasks (Spark reuses its workers):
# creating one cost ~15 ms of CPU and ~100 ms of wall time, for each task of
# every micro-batch.
_EXECUTOR_CONSUMERS: dict[tuple[str, int], KafkaConsumer] = {}


def executor_consumer(options: KafkaReaderOptions) -> KafkaConsumer:
    key = (options.bootstrap_servers, options.timeout_ms, options.client_settings)
    consumer = _EXECUTOR_CONSUMERS.get(key)
    if consumer is None:
        consumer = _EXECUTOR_CONSUMERS[key] = new_consumer(options, client_id="fleetwatch-source-reader",
                                                            fetch_max_wait_ms=10)
        _keep_metadata_of(consumer, options.topics)
    return consumer


def drop_executor_consumer(options: KafkaReaderOptions) -> None:
    consumer = _EXECUTOR_CONSUMERS.pop((options.bootstrap_servers, options.timeout_ms, options.client_settings), None)
    if consumer is not None:
        with contextlib.suppress(Exception):
            consumer.close()


def new_consumer(options: KafkaReaderOptions, *, client_id: str, **config: Any) -> KafkaConsumer:
    try:
        consumer = KafkaConsumer(
            bootstrap_servers=options.bootstrap_servers.split(","),
            client_id=client_id,
            group_id=None,  # assign() + seek() only: Tansu never completes a group join
            enable_auto_commit=False,
            # Only when retention deleted the requested offsets: skip ahead instead of failing.
            auto_offset_reset="earliest",
            request_timeout_ms=options.timeout_ms,
            bootstrap_timeout_ms=options.timeout_ms,
            # Back on the bus within a second of its return (kafka-python waits up to 30 s by default).
            reconnect_backoff_max_ms=1000,
            **dict(options.client_settings),
            **config,
        )
    except KafkaError as exc:
        raise KafkaSourceError(f"{SHORT_NAME}: cannot connect to {options.bootstrap_servers}: {exc}") from exc
    _never_create_topics(consumer)
    return consumer


def _keep_metadata_of(consumer: KafkaConsumer, topics: tuple[str, ...]) -> None:
    """The metadata of every topic the reader reads, kept from one range to the next. kafka-python's
    assign() narrows the topics whose metadata it keeps to those assigned, so a task's next range in
    another topic waited for the refresh: its poll found no leader and slept its retry backoff, 100 ms
    per topic of a task, each micro-batch (103 ms -> 2 ms a range, on Tansu). With all of them tracked,
    assigning one is no change. On kafka-python's cluster view, as `_never_create_topics`."""
    cluster = getattr(consumer, "_cluster", None)
    if callable(getattr(cluster, "set_topics", None)):
        cluster.set_topics(list(topics))


def _never_create_topics(consumer: KafkaConsumer) -> None:
    """A reader must not bring back a topic deleted under it: its Metadata requests for an assigned
    topic would create it again on a bus with `auto.create.topics.enable` (Kafka's default), empty,
    under a new id. kafka-python 3.0.12 drops the consumer's `allow_auto_create_topics` (its cluster
    view is built without it: every Metadata request asks for creation, measured on Kafka 4.4), so
    it is set on that view."""
    cluster = getattr(consumer, "_cluster", None)
    config = getattr(cluster, "config", None)
    if isinstance(config, dict) and "allow_auto_create_topics" in config:
        config["allow_auto_create_topics"] = False
