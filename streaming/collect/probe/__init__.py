"""`fleetwatch probe`: poll real Kafka clusters and publish what they answer (SPEC section 3).

Per target, every `interval_ms` (a *round*):

1. Bootstrap: one connection to a configured bootstrap address (the last one that answered
   first; on failure the next, while the round's timeout lasts): ApiVersions, SASL when
   configured, Metadata at the highest version both sides support, DescribeCluster v2 with
   IncludeFencedBrokers (Kafka 4.0+) for each broker's `fenced` flag, DescribeQuorum (KRaft)
   for the active controller and, from v1, each observer's LastFetchTimestamp. One
   `metadata_response` event with `expected` null per attempt.
   A target pinned by `expected_cluster_id` (issue 31): where the pinned cluster advertised the
   bootstrap address itself (within `forget_after_ms`) and the broker offers ApiVersions v5, the
   bootstrap sends the pinned id and that node's id. Kafka 4.4 takes both or neither (a ClusterId
   without a NodeId is INVALID_REQUEST), so a first round, an address the cluster does not
   advertise (a load balancer, an alias) and Kafka 4.3 or older take the Metadata fallback: the
   answer's cluster id, `expected` null (`cluster.id_changed` compares it with the pin). A refusal
   (`REBOOTSTRAP_REQUIRED`) is published with the identity sent as `expected`, so it is a
   `connection.misrouted` of that endpoint for that target; it reports no cluster id, so it neither
   fires nor resolves `cluster.id_changed`, and the next bootstrap address is tried. So is the
   next address after a fallback answer from another cluster: that answer is published (it is
   the target reporting another id) and nothing else of that cluster is taken for the target (its
   brokers, endpoints and heartbeats are not the target's).
2. Endpoints: one connection to every endpoint advertised by a bootstrap answer within the
   last `forget_after_ms` (so a fenced or partitioned broker that still answers is seen), with
   `expected` = the cluster id and node id that advertisement named. Where the broker offers
   ApiVersions v5 (Kafka 4.4+, KIP-1242) the expected identity is sent and a misroute answers
   `REBOOTSTRAP_REQUIRED`; otherwise the event carries the cluster id the endpoint reports.
3. Heartbeats: every exchange also asks DescribeQuorum (a broker forwards it to the active
   controller). Each broker's LastFetchTimestamp (observers, and voters that are brokers: in the
   combined layout every broker is a voter and there are no observers) that moved since the
   last round becomes a `broker_heartbeat` event (`broker_epoch` -1: DescribeQuorum does not
   carry the epoch; the detection rules read a negative epoch as unknown, see
   streaming/detect/README.md). The views of all exchanges of the round are merged, so one
   partitioned broker whose forwarded request times out does not hide everybody's heartbeats.
   One clock per probe (SPEC section 3, amended 2026-11-26): a LastFetchTimestamp is on the KRaft
   leader's clock, so it is never a `ts` itself. The leader lists itself with its current time
   (Kafka's `LeaderState.describeReplicaState`); a fetch's age is that time minus the fetch, and
   the heartbeat's `ts` is the probe's receive time minus the age. An answer without the leader's
   own time gives no heartbeat. Whether a fetch moved is decided on the leader's clock too.
4. Lifecycle: the bootstrap's DescribeCluster v2 registrations (fenced or not) become
   `broker_state` events when they change: ONLINE, FENCED, and OFFLINE for a broker that is no
   longer registered. Only a bootstrap in touch with the controller (its DescribeQuorum was
   answered) speaks for registrations and fencing; a cut-off broker's view is stale, so its
   `fenced` flags are dropped from the event.

5. The controller's own view (issue 31), for a cluster with `controller_metrics` (the
   controllers' Prometheus endpoints, served by the JMX exporter agent): each round reads every
   controller's metrics alongside the endpoints; the active one's per-broker registration state
   (STOPPING for a controlled shutdown) and heartbeat age become `broker_state` and
   `broker_heartbeat` events, on the probe's clock, deduplicated with 3 and 4 (a state published
   once whoever saw it; a heartbeat only when later than every one already published). While it
   answers it replaces DescribeCluster for registrations. See controller_view.py.

Only versions the broker advertises are sent. Every exchange (connect, TLS, SASL, all
requests) is bounded by `timeout_ms`, and in a live run a target still busy from the previous
tick is skipped. In a live run each exchange's `metadata_response` is published as the exchange
ends (issue 45.3: one that times out holds back no other answer of its cluster); what the round
derives from several answers (registrations, heartbeats) and its `collector_round` when it ends.

Isolation (issue 26): one dead, slow or hostile cluster never delays the others.
- Slots: an exchange first takes one of its target's `target_concurrency` slots, then one of the
  `concurrency` shared by all targets; so one target's black holes queue behind each other, never
  in front of another target's exchanges (`slots.Slots`).
- Endpoint cap: at most `max_endpoints` endpoints per target and round: the bootstrap addresses
  first, then the most recently advertised (among equals, those already probed, then the
  answer's order). Within the cap, an endpoint is probed for `forget_after_ms` after it was last
  advertised; what is left out is logged once (going over, and coming back under) and counted
  on the round's bootstrap event as `endpoints_not_probed.over_cap`.
- Invalid advertised addresses (port outside 1..65535, empty host, over 253 characters, spaces
  or control characters) are refused one by one, never failing the round: logged once each, and
  named on the bootstrap event (`endpoints_not_probed.invalid`, up to 10). A broker whose host
  or rack the contract refuses (over 255 characters) is left out of the event's `brokers`, so
  the event stands.
- Name lookups (getaddrinfo blocks a thread and cannot be stopped): each target has
  `LOOKUPS_PER_TARGET` (8) lookups in threads at a time, each held until its thread returns, even
  past the timeout, from a pool with as many threads per target (up to 1,024): a target whose names
  do not resolve times its own exchanges out and delays no other target's lookups.
- Answers: a frame over `max_response_bytes` fails that exchange with `RESPONSE_TOO_LARGE`
  before its payload is read; a frame over 8 KiB is decoded in a worker thread, one per target
  at a time (held until done, even past the timeout), never on the event loop.
- SCRAM: an iteration count outside Kafka's 4096..16384 (ScramMechanism's minIterations, which
  Kafka's client enforces, and maxIterations, the most a broker stores) fails authentication
  (`AUTH_FAILED`) before any key is derived, so no proof is sent; the derivation runs in a worker.
  So does a server message that is not SCRAM (not UTF-8, a count that is not ASCII digits, a
  salt or signature that is not base64): one line in the event's `error_detail`, no traceback.
The limits are the config's `probe:` section (streaming/config/, ProbeConfig).

The controller id: in KRaft, Metadata's ControllerId is a random live broker (KIP-590), which
would look like a controller that moves every round (measured on Kafka 4.4). When the broker
offers DescribeQuorum (KRaft), Metadata's ControllerId is never used: DescribeQuorum's LeaderId is
reported (-1 when the quorum has no leader); a DescribeQuorum that times out (the broker cannot
reach an active controller: measured with two of three controllers killed) reports -1; any other
refusal (authorization, version) reports the controller as unknown (`controller_known` false,
`controller_id` null), which the controller rules ignore. Without DescribeQuorum (ZooKeeper-era
brokers) Metadata's ControllerId is the real controller and is reported. With a leader,
DescribeQuorum's LeaderEpoch goes with it as `controller_epoch` (an optional contract field, see
streaming/detect/README.md): a restarted or re-elected controller keeps its id but not its epoch.

`responder_node_id`: the expected node when ApiVersions v5 confirmed it; otherwise the one node
that the answer itself lists at the address we connected to (null when none or several).

6. The partition layout (issue 30), on its own slower cadence (`probe.layout_interval_ms`, off
   unless set; `fleetwatch probe` sets 60 s), apart from the rounds so that a long reading never
   delays a heartbeat: DescribeTopicPartitions along its cursor (else Metadata with every topic) and
   DescribeConfigs for min.insync.replicas, bounded in bytes and time per cluster, from where the
   last bootstrap answered; one `partition_layout` event per reading. See layout.py.

7. The fast quorum reading (issue 44), on its own faster cadence (`probe.quorum_interval_ms`, 1 s; 0:
   off), apart from the rounds, once a round reached the cluster: DescribeQuorum and DescribeCluster v2
   on one connection per cluster kept open between readings, to the bootstrap address where the cluster
   last answered (the next one after a failure); one `quorum_reading` event per reading: each broker's
   fetch age (the leader's now minus when its last fetch came, on the leader's clock; `ts` the probe's
   receive time) and registration. See quorum.py, and `bench/quorum_cost.py` for what it costs.

The rooms: targets (configured clusters, addresses, options), exchange (one connection's
requests and what they answer), kraft_readings (DescribeQuorum heartbeats and registrations as
events), controller_view (the controllers' Prometheus metrics as events), layout (the partition
layout), quorum (the fast quorum readings), slots (what exchanges wait for), prober (rounds and
the live loop), publish (JSONL file or the bus) and cli
(`fleetwatch probe`).
"""

from streaming.collect.probe.cli import command, configure_parser
from streaming.collect.probe.exchange import METADATA_LOG
from streaming.collect.probe.layout import LayoutReading, layout_event, read_layout
from streaming.collect.probe.prober import EventSink, Prober
from streaming.collect.probe.publish import BusPublisher, JsonlWriter
from streaming.collect.probe.targets import (
    LayoutLimits,
    ProbeOptions,
    Target,
    format_address,
    parse_address,
    targets_from_config,
)

__all__ = [
    "METADATA_LOG",
    "BusPublisher",
    "EventSink",
    "JsonlWriter",
    "LayoutLimits",
    "LayoutReading",
    "ProbeOptions",
    "Prober",
    "Target",
    "command",
    "configure_parser",
    "format_address",
    "layout_event",
    "parse_address",
    "read_layout",
    "targets_from_config",
]
