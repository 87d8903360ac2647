"""The command-line tools of Apache Kafka 4.4.0's distribution (`bin/`), and the options of those the
runbooks use (docs/runbooks/, checked by tests/docs/test_runbooks.py).

Where the list comes from (issue 43; Kafka's release tarball is not on Maven Central, and the tag
4.4.0's tree could not be read here):
- the `.sh` scripts of apache/kafka's `bin/` at trunk of 2024-10 (the newest snapshot of the
  repository available), each mapped to the class it runs (`kafka-run-class.sh <class>`);
- kept when that class is in Kafka 4.4.0's jars from Maven Central: kafka-tools 4.4.0 (every
  `org.apache.kafka.tools.*` tool; AclCommand, ConfigCommand and DumpLogSegments now live there too,
  so kafka-acls.sh, kafka-configs.sh and kafka-dump-log.sh stay) and kafka_2.13 4.4.0 (`kafka.Kafka`,
  `kafka.tools.StorageTool`). Dropped: the ZooKeeper scripts (zookeeper-server-start.sh,
  zookeeper-server-stop.sh, zookeeper-shell.sh, zookeeper-security-migration.sh): Kafka 4.0 removed
  ZooKeeper and their classes are in no 4.4.0 jar;
- added: scripts of apache/kafka's `bin/` newer than that snapshot whose classes kafka-tools 4.4.0
  has: kafka-groups.sh (GroupsCommand), kafka-streams-groups.sh (streams.StreamsGroupCommand),
  kafka-share-consumer-perf-test.sh (ShareConsumerPerformance), kafka-verifiable-share-consumer.sh
  (VerifiableShareConsumer);
- not checked against a 4.4.0 jar (their jars were not fetched): the connect-*.sh scripts,
  kafka-metadata-shell.sh and trogdor.sh, kept from the 2024 list.
The options are the option names in those 4.4.0 classes (joptsimple's `accepts(...)`, argparse4j's
`addArgument(...)`), read with `strings` from kafka-tools-4.4.0.jar and kafka_2.13-4.4.0.jar.
"""

from __future__ import annotations

__all__ = ["KAFKA_4_4_BIN", "KAFKA_4_4_OPTIONS"]

KAFKA_4_4_BIN = frozenset({
    "connect-distributed.sh", "connect-mirror-maker.sh", "connect-plugin-path.sh", "connect-standalone.sh",
    "kafka-acls.sh", "kafka-broker-api-versions.sh", "kafka-client-metrics.sh", "kafka-cluster.sh",
    "kafka-configs.sh", "kafka-console-consumer.sh", "kafka-console-producer.sh", "kafka-console-share-consumer.sh",
    "kafka-consumer-groups.sh", "kafka-consumer-perf-test.sh", "kafka-delegation-tokens.sh",
    "kafka-delete-records.sh", "kafka-dump-log.sh", "kafka-e2e-latency.sh", "kafka-features.sh",
    "kafka-get-offsets.sh", "kafka-groups.sh", "kafka-jmx.sh", "kafka-leader-election.sh", "kafka-log-dirs.sh",
    "kafka-metadata-quorum.sh", "kafka-metadata-shell.sh", "kafka-producer-perf-test.sh",
    "kafka-reassign-partitions.sh", "kafka-replica-verification.sh", "kafka-run-class.sh", "kafka-server-start.sh",
    "kafka-server-stop.sh", "kafka-share-consumer-perf-test.sh", "kafka-share-groups.sh", "kafka-storage.sh",
    "kafka-streams-application-reset.sh", "kafka-streams-groups.sh", "kafka-topics.sh", "kafka-transactions.sh",
    "kafka-verifiable-consumer.sh", "kafka-verifiable-producer.sh", "kafka-verifiable-share-consumer.sh",
    "trogdor.sh",
})

# script -> the options its 4.4.0 class defines (those a runbook may give it)
KAFKA_4_4_OPTIONS: dict[str, frozenset[str]] = {
    "kafka-metadata-quorum.sh": frozenset({"--bootstrap-server", "--bootstrap-controller", "--command-config",
                                           "--status", "--replication", "--human-readable"}),
    "kafka-cluster.sh": frozenset({"--bootstrap-server", "--bootstrap-controller", "--command-config", "--config",
                                   "--id", "--include-fenced-brokers"}),
    "kafka-broker-api-versions.sh": frozenset({"--bootstrap-server", "--command-config"}),
    "kafka-log-dirs.sh": frozenset({"--bootstrap-server", "--command-config", "--describe", "--broker-list",
                                    "--topic-list"}),
    "kafka-topics.sh": frozenset({"--bootstrap-server", "--command-config", "--describe", "--list", "--topic",
                                  "--topic-id", "--under-min-isr-partitions", "--under-replicated-partitions",
                                  "--unavailable-partitions", "--at-min-isr-partitions", "--exclude-internal",
                                  "--topics-with-overrides"}),
    "kafka-configs.sh": frozenset({"--bootstrap-server", "--bootstrap-controller", "--command-config",
                                   "--entity-type", "--entity-name", "--entity-default", "--describe"}),
    "kafka-leader-election.sh": frozenset({"--bootstrap-server", "--command-config", "--election-type",
                                           "--all-topic-partitions", "--topic", "--partition", "--path-to-json-file"}),
    "kafka-get-offsets.sh": frozenset({"--bootstrap-server", "--command-config", "--topic", "--partitions", "--time",
                                       "--exclude-internal-topics"}),
    "kafka-storage.sh": frozenset({"--config", "-c", "--cluster-id", "-t"}),
}
