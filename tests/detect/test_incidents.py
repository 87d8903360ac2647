"""Fleet incidents (issue 30.2): the grouping core over plain alerts and places, no Spark, no store.
What groups (a shared rack, tag, subnet, DNS zone within the window), what must not (different
racks and regions, a domain the whole fleet is in, starts too far apart, one cluster alone), and
that the result depends on nothing but the input (order, repeats)."""

from __future__ import annotations

import random

import pytest

from streaming.config import ConfigError, load_config
from streaming.detect import BrokerPlace, ClusterPlace, Domain, GroupingRules, group_incidents, places_of
from streaming.detect.domains import address_domains, host_domains
from streaming.records.alert import Alert

T0 = 1_764_000_000_000


def _fleet(n: int = 6, racks: dict[str, tuple[str, ...]] | None = None,
           tags: dict[str, dict[str, str]] | None = None) -> dict[str, ClusterPlace]:
    """n clusters c0..: brokers 1-3 in the racks given (default: rack `<cluster>-r<n>`, nothing shared)."""
    out = {}
    for i in range(n):
        key = f"c{i}"
        rack_names = (racks or {}).get(key) or tuple(f"{key}-r{b}" for b in (1, 2, 3))
        brokers = {b: BrokerPlace(rack, (f"{key}-b{b}.kafka.example.com:9092",))
                   for b, rack in enumerate(rack_names, 1)}
        out[key] = ClusterPlace(key, f"t{i}", (tags or {}).get(key, {}), brokers)
    return out


def _alert(cluster: str, broker: int | None, at: int, rule: str = "broker.heartbeat_lost",
           ends: int | None = None) -> Alert:
    subject = f"{cluster}/{broker}" if broker is not None else cluster
    a = Alert.firing(rule, subject, at, "s", cluster_id=cluster, broker_id=broker)
    return a.resolved_at(ends) if ends is not None else a


def test_one_rack_across_clusters_is_one_incident_with_its_members_start_and_end():
    fleet = _fleet(racks={"c0": ("r7", "x0", "y0"), "c1": ("q1", "r7", "z1"), "c2": ("r7", "w2", "v2")})
    alerts = [_alert("c0", 1, T0, ends=T0 + 50_000), _alert("c1", 2, T0 + 3000, ends=T0 + 40_000),
              _alert("c2", 1, T0 + 9000, rule="broker.fenced", ends=T0 + 70_000),
              _alert("c3", 1, T0 + 1000)]  # rack c3-r1: another rack, same moment
    (incident,) = group_incidents(alerts, fleet)
    assert incident.domain == Domain("rack", "r7")
    assert incident.clusters == ("c0", "c1", "c2")
    assert [m.cluster_id for m in incident.members] == ["c0", "c1", "c2"]
    assert (incident.starts_at, incident.ends_at, incident.status) == (T0, T0 + 70_000, "resolved")
    # One member still firing: the incident is open.
    alerts[2] = _alert("c2", 1, T0 + 9000, rule="broker.fenced")
    (still,) = group_incidents(alerts, fleet)
    assert (still.ends_at, still.status, still.incident_id) == (None, "firing", incident.incident_id)


def test_unrelated_faults_at_the_same_time_are_not_grouped():
    fleet = _fleet(tags={"c0": {"region": "eu"}, "c1": {"region": "us"}, "c2": {"region": "ap"}})
    alerts = [_alert("c0", 1, T0), _alert("c1", 2, T0 + 10), _alert("c2", 3, T0 + 20)]
    assert group_incidents(alerts, fleet) == []


def test_a_domain_the_whole_fleet_shares_is_no_evidence():
    # Racks a, b, c in every cluster (the simulator's naming) and one DNS zone for all.
    fleet = {f"c{i}": ClusterPlace(f"c{i}", None, {"env": "prod"}, {
        b: BrokerPlace("abc"[b - 1], (f"c{i}-b{b}.fleet.local:9092",)) for b in (1, 2, 3)}) for i in range(4)}
    alerts = [_alert(f"c{i}", 1, T0 + i) for i in range(4)]
    assert group_incidents(alerts, fleet) == []


def test_a_domain_held_by_most_of_the_fleet_is_no_evidence_unless_the_share_allows_it():
    tags = {f"c{i}": {"region": "eu" if i < 5 else "us"} for i in range(6)}  # eu: 5 of 6 clusters
    fleet = _fleet(tags=tags)
    alerts = [_alert("c0", 1, T0), _alert("c1", 1, T0 + 5)]
    assert group_incidents(alerts, fleet) == []
    (incident,) = group_incidents(alerts, fleet, GroupingRules(max_domain_share=0.9, min_hit_share=0.4))
    assert incident.domain == Domain("tag", "region=eu")


def test_a_few_clusters_of_a_large_domain_failing_together_are_a_coincidence():
    tags = {f"c{i}": {"region": "eu" if i < 6 else "us"} for i in range(12)}
    alerts = [_alert("c0", 1, T0), _alert("c1", 1, T0 + 5)]  # 2 of eu's 6 clusters
    assert group_incidents(alerts, _fleet(12, tags=tags)) == []
    (incident,) = group_incidents([*alerts, _alert("c2", 1, T0 + 9)], _fleet(12, tags=tags))  # half of eu
    assert incident.clusters == ("c0", "c1", "c2")


def test_starts_further_apart_than_the_window_are_not_grouped():
    fleet = _fleet(racks={"c0": ("r7", "x", "y"), "c1": ("r7", "z", "w")})
    alerts = [_alert("c0", 1, T0), _alert("c1", 1, T0 + 60_001)]
    assert group_incidents(alerts, fleet) == []
    assert len(group_incidents(alerts, fleet, GroupingRules(window_ms=60_001))) == 1


def test_alerts_of_one_cluster_alone_are_no_fleet_incident():
    fleet = _fleet(racks={"c0": ("r7", "r7", "y"), "c1": ("r7", "z", "w")})
    assert group_incidents([_alert("c0", 1, T0), _alert("c0", 2, T0 + 10)], fleet) == []
    assert group_incidents([_alert("c0", 1, T0), _alert("c0", 2, T0 + 10), _alert("c1", 1, T0 + 20)],
                           fleet, GroupingRules(min_clusters=3)) == []


def test_the_most_specific_shared_domain_wins_and_each_alert_is_in_one_incident():
    # c0, c1 share rack r7 and region eu; c2 shares only region eu (3 of 6 clusters: evidence).
    tags = {k: {"region": "eu"} for k in ("c0", "c1", "c2")}
    fleet = _fleet(racks={"c0": ("r7", "a0", "b0"), "c1": ("r7", "a1", "b1")}, tags=tags)
    alerts = [_alert("c0", 1, T0), _alert("c1", 1, T0 + 5), _alert("c2", 1, T0 + 9)]
    (incident,) = group_incidents(alerts, fleet)
    assert (incident.domain, incident.clusters) == (Domain("rack", "r7"), ("c0", "c1"))
    # A fourth alert of the region: c2 and c3 make an incident of their own.
    tags["c3"] = {"region": "eu"}
    fleet = _fleet(racks={"c0": ("r7", "a0", "b0"), "c1": ("r7", "a1", "b1")}, tags=tags)
    found = group_incidents([*alerts, _alert("c3", 2, T0 + 20)], fleet)
    assert [(i.domain.kind, i.clusters) for i in found] == [("rack", ("c0", "c1")), ("tag", ("c2", "c3"))]


def test_cluster_alerts_count_what_every_broker_of_the_cluster_shares():
    fleet = _fleet(racks={"c0": ("r7", "r7", "r7"), "c1": ("r7", "r7", "r7"), "c2": ("r7", "q", "q")})
    alerts = [_alert("c0", None, T0, rule="cluster.no_controller"),
              _alert("c1", None, T0 + 100, rule="cluster.no_controller"),
              _alert("c2", None, T0 + 200, rule="cluster.no_controller")]  # c2 is only partly in r7
    (incident,) = group_incidents(alerts, fleet)
    assert incident.clusters == ("c0", "c1")


def test_a_target_alert_without_cluster_id_is_found_by_its_target():
    fleet = _fleet(racks={"c0": ("r7",) * 3, "c1": ("r7",) * 3})
    lost = Alert.firing("cluster.unreachable", "t1", T0 + 10, "s", target="t1")
    (incident,) = group_incidents([_alert("c0", 1, T0), lost], fleet)
    assert incident.clusters == ("c0", "c1")


def test_grouping_depends_only_on_the_alerts_not_their_order():
    fleet = _fleet(12, racks={f"c{i}": (f"r{i % 3}", f"s{i % 4}", f"u{i}") for i in range(12)})
    rng = random.Random(7)
    alerts = [_alert(f"c{rng.randrange(12)}", rng.randrange(1, 4), T0 + rng.randrange(600_000)) for _ in range(60)]
    expected = group_incidents(alerts, fleet)
    assert expected, "the case should group something"
    for _ in range(5):
        rng.shuffle(alerts)
        assert group_incidents(alerts + alerts[:7], fleet) == expected
    assert len({a.alert_id for i in expected for a in i.members}) == sum(len(i.members) for i in expected)


@pytest.mark.parametrize(("host", "domains"), [
    ("b1.pay.eu.example.com", {"host:b1.pay.eu.example.com", "dns_suffix:pay.eu.example.com"}),
    ("b1.pay", {"host:b1.pay"}),
    ("10.1.2.3", {"host:10.1.2.3", "subnet:10.1.2.0/24"}),
    ("fd00::1", {"host:fd00::1", "subnet:fd00::/64"}),
])
def test_host_domains(host, domains):
    assert {str(d) for d in host_domains(host)} == domains


def test_address_domains_drop_the_port_and_brackets():
    assert {str(d) for d in address_domains("[fd00::1]:9092")} == {"host:fd00::1", "subnet:fd00::/64"}
    assert {str(d) for d in address_domains("10.0.0.9:9092")} == {"host:10.0.0.9", "subnet:10.0.0.0/24"}


def test_places_join_store_rows_and_configured_tags():
    rows = [{"cluster_id": "ID1", "broker_id": 1, "rack": "r7", "endpoints": ["b1.x.example.com:9092"]},
            {"cluster_id": "ID2", "broker_id": 1, "rack": None, "endpoints": []}]
    places = places_of(rows, {"ID1": "pay", "ID2": "ads"},
                       [("pay", None, {"region": "eu"}), ("ads", "ID2", {"region": "us"}), ("new", None, {"a": "b"})])
    assert places["ID1"].tags == {"region": "eu"} and places["ID1"].target == "pay"
    assert places["ID1"].brokers[1] == BrokerPlace("r7", ("b1.x.example.com:9092",))
    assert places["ID2"].tags == {"region": "us"} and places["new"].tags == {"a": "b"}


def test_incident_settings_are_bounded_and_unknown_keys_refused(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("incidents: {window_ms: 500}\n")
    with pytest.raises(ConfigError, match=r"incidents\.window_ms"):
        load_config(path)
    path.write_text("incidents: {windw_ms: 5000}\n")
    with pytest.raises(ConfigError, match=r"incidents\.windw_ms: unknown key"):
        load_config(path)
    path.write_text("incidents: {domains: [rack, zone]}\n")
    with pytest.raises(ConfigError, match=r"incidents\.domains"):
        load_config(path)
    path.write_text("incidents: {domains: [rack, tag], window_ms: 30000}\n")
    assert load_config(path).incidents.domains == ("rack", "tag")
