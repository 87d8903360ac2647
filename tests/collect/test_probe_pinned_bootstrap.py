"""The bootstrap of a pinned target against real Apache Kafka (issue 31 point 2), probe and detection
engines without Spark and without a bus (`streaming.detect.detect`, one micro-batch per event).

A target pinned by `expected_cluster_id` bootstraps at one address, a `TcpProxy` in front of its
single broker (Kafka 4.4), which advertises that very address: the probe learns which node answers
there. Then the proxy is re-pointed at the broker of another cluster (a rolling restart that
re-assigned the address):
- another Kafka 4.4 broker refuses the bootstrap's ApiVersions v5 (the pinned id and that node) with
  REBOOTSTRAP_REQUIRED: `connection.misrouted` for that target and address, and the target's
  identity is not taken from the stranger (no `cluster.id_changed`, none of its brokers probed);
- a Kafka 4.3 broker offers no v5: the Metadata fallback reads its cluster id, `expected` null, so
  `cluster.id_changed` fires for the target (and the endpoint probe of the address, which expects
  the pinned cluster's node, is `connection.misrouted` by its cluster id).
Re-pointed home, both resolve.
In every case, nothing of the stranger but the bootstrap's answer is published for the target: not
its brokers' heartbeats or registrations, not its endpoints (a probe started during the misroute,
which knows no node at the address yet, included).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from support.healthy_kafka import PROBE

from streaming.collect.probe import Prober
from streaming.config import FleetwatchConfig
from streaming.detect import detect
from streaming.records.alert import Alert
from streaming.records.contract import event_from_dict
from streaming.workshop.kraft import KRaftCluster, TcpProxy, target_of
from streaming.workshop.polling import poll

pytestmark = [pytest.mark.real_kafka]

TARGET = "pinned"
Events = list[dict[str, Any]]


class Home:
    """The pinned cluster: one Kafka 4.4 broker behind a proxy, advertised at the proxy's address;
    and the strangers (one broker each, by Kafka bundle) the proxy can be re-pointed at."""

    def __init__(self, workdir: Path) -> None:
        self.cluster = KRaftCluster(workdir / "home", brokers=1)
        self.proxy = TcpProxy(("127.0.0.1", self.cluster.nodes[1].client_port or 0))
        self.cluster.advertise[1] = self.proxy.address
        self.strangers = {bundle: KRaftCluster(workdir / bundle, brokers=1, bundle=bundle)
                          for bundle in ("kafka-4.4.0", "kafka-4.3.1")}

    def go_home(self) -> None:
        self.proxy.retarget(("127.0.0.1", self.cluster.nodes[1].client_port or 0))

    def go_to(self, bundle: str) -> KRaftCluster:
        stranger = self.strangers[bundle]
        self.proxy.retarget(("127.0.0.1", stranger.nodes[1].client_port or 0))
        return stranger


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Iterator[Home]:
    fleet = Home(tmp_path_factory.mktemp("pinned-bootstrap"))
    clusters = [fleet.cluster, *fleet.strangers.values()]
    try:
        with ThreadPoolExecutor(len(clusters)) as pool:
            for started in [pool.submit(c.start) for c in clusters]:
                started.result()
        yield fleet
    finally:
        fleet.proxy.close()
        for cluster in clusters:
            cluster.stop_all()


class Rounds:
    """The real probe of the pinned target, one round at a time in the test's thread."""

    def __init__(self, home: Home) -> None:
        self.prober = Prober([target_of(TARGET, [home.proxy.address], home.cluster.cluster_id)], PROBE)
        self.book = FleetwatchConfig.model_validate(
            {"clusters": [{"name": TARGET, "expected_cluster_id": home.cluster.cluster_id}]}).rule_book()
        self.events: Events = []

    def until(self, what: str, done: Callable[[Events], bool], timeout_s: float = 60) -> Events:
        """Probe rounds until one's metadata_responses satisfy `done`; that round's responses."""
        def one_round() -> Events | None:
            events = self.prober.probe_round()
            self.events.extend(events)
            responses = [ev for ev in events if ev["type"] == "metadata_response"]
            return responses if done(responses) else None

        return poll(one_round, timeout_s, what, interval_s=0)

    def alerts(self) -> list[Alert]:
        return detect([event_from_dict(ev) for ev in self.events], self.book, batch_size=1)


def _answered_home(home: Home) -> Callable[[Events], bool]:
    """A round whose bootstrap answered for the pinned cluster and whose endpoint probe of the
    advertised address confirmed node 1: the probe knows which node the address leads to."""
    pinned = home.cluster.cluster_id

    def done(responses: Events) -> bool:
        return (any(r["expected"] is None and r["error"] is None and r["cluster_id"] == pinned for r in responses)
                and any(r["expected"] == {"cluster_id": pinned, "node_id": 1} and r["error"] is None
                        and r["responder_node_id"] == 1 for r in responses))
    return done


def _misrouted(home: Home, bundle: str) -> tuple[KRaftCluster, Rounds, Events]:
    """The pinned target probed healthy, then its address re-pointed at the stranger running
    `bundle`; returns the stranger, the rounds, and the responses of the first round that reached it."""
    rounds = Rounds(home)
    rounds.until("the pinned cluster answering at its bootstrap address", _answered_home(home))
    stranger = home.go_to(bundle)
    pinned = home.cluster.cluster_id
    misrouted = rounds.until("a round that reached the stranger", lambda responses: any(
        r["error"] is not None or r["cluster_id"] != pinned for r in responses), timeout_s=30)
    return stranger, rounds, misrouted


def test_a_pinned_bootstrap_that_leads_to_another_kafka_4_4_cluster_is_misrouted(home):
    pinned = home.cluster.cluster_id
    stranger, rounds, misrouted = _misrouted(home, "kafka-4.4.0")
    try:
        # The stranger's broker refused both the bootstrap and the endpoint probe of the address:
        # each sent the pinned id and node 1, each is published with that expectation.
        expected = {"cluster_id": pinned, "node_id": 1}
        assert [(r["endpoint"], r["expected"], r["error"], r["cluster_id"]) for r in misrouted] == [
            (home.proxy.address, expected, "REBOOTSTRAP_REQUIRED", None)] * 2, misrouted
        home.go_home()
        rounds.until("the pinned cluster answering again", _answered_home(home))
    finally:
        home.go_home()
    assert not [ev for ev in rounds.events if ev["cluster_id"] == stranger.cluster_id]  # never taken for the target
    alerts = [(a.rule, a.status, a.target, a.endpoint, a.details.get("expected")) for a in rounds.alerts()]
    print("alerts:", alerts)
    assert alerts == [("connection.misrouted", "firing", TARGET, home.proxy.address, expected),
                      ("connection.misrouted", "resolved", TARGET, home.proxy.address, expected)]


def test_a_pinned_bootstrap_that_leads_to_a_kafka_4_3_cluster_takes_the_metadata_fallback(home):
    pinned = home.cluster.cluster_id
    stranger, rounds, misrouted = _misrouted(home, "kafka-4.3.1")
    try:
        # No ApiVersions v5 on 4.3: the bootstrap reads the stranger's id (a bootstrap, `expected` null).
        # The endpoint probe of the address, which expects the pinned node, reads it the same way.
        assert sorted(((r["endpoint"], r["expected"], r["error"], r["cluster_id"]) for r in misrouted
                       if r["endpoint"] == home.proxy.address), key=str) == [
            (home.proxy.address, None, None, stranger.cluster_id),
            (home.proxy.address, {"cluster_id": pinned, "node_id": 1}, None, stranger.cluster_id)]
        home.go_home()
        rounds.until("the pinned cluster answering again", _answered_home(home))
    finally:
        home.go_home()
    assert _of_the_stranger_but_its_bootstrap(rounds, stranger, home) == []
    alerts = {(a.rule, a.status, a.target, a.endpoint, a.cluster_id) for a in rounds.alerts()}
    print("alerts:", sorted(alerts, key=str))
    assert {("cluster.id_changed", "firing", TARGET, home.proxy.address, stranger.cluster_id),
            ("cluster.id_changed", "resolved", TARGET, home.proxy.address, stranger.cluster_id),
            ("connection.misrouted", "firing", TARGET, home.proxy.address, stranger.cluster_id)} <= alerts
    assert {(rule, status) for rule, status, *_ in alerts} == {
        ("cluster.id_changed", "firing"), ("cluster.id_changed", "resolved"),
        ("connection.misrouted", "firing"), ("connection.misrouted", "resolved")}


def _of_the_stranger_but_its_bootstrap(rounds: Rounds, stranger: KRaftCluster, home: Home) -> Events:
    """Every event of the rounds that says something of the stranger, but the bootstrap's answer."""
    return [ev for ev in rounds.events if ev["cluster_id"] == stranger.cluster_id
            and not (ev["type"] == "metadata_response" and ev["endpoint"] == home.proxy.address)]


def test_a_probe_started_while_the_pinned_address_leads_to_a_stranger_publishes_nothing_of_it(home):
    # The probe (re)starts during the misroute: it knows no node at the address, so its bootstrap
    # takes the Metadata fallback and reads the stranger's id. That answer is published (the
    # target reports another id: `cluster.id_changed`), and nothing else of the stranger is.
    stranger = home.go_to("kafka-4.4.0")
    try:
        rounds = Rounds(home)
        first = rounds.until("a round that reached the stranger", lambda responses: bool(responses))
        assert [(r["endpoint"], r["expected"], r["error"], r["cluster_id"]) for r in first] == [
            (home.proxy.address, None, None, stranger.cluster_id)], first
        rounds.until("a second round", lambda responses: bool(responses))
        assert _of_the_stranger_but_its_bootstrap(rounds, stranger, home) == []
        home.go_home()
        rounds.until("the pinned cluster answering", _answered_home(home))
    finally:
        home.go_home()
    alerts = {(a.rule, a.status, a.target) for a in rounds.alerts()}
    print("alerts:", sorted(alerts))
    assert alerts == {("cluster.id_changed", "firing", TARGET), ("cluster.id_changed", "resolved", TARGET)}
