"""`fleetwatch replay` through the real Spark job: the worked examples, determinism, quarantine."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from sqlalchemy import func, select
from support.paths import EXAMPLES

from streaming.job import replay_file
from streaming.pipeline.parse import bucket_of
from streaming.store import Store, alert_history, alerts, outbox, quarantine

pytestmark = pytest.mark.spark

DECIDING = ("status", "rule", "severity", "cluster_id", "target", "broker_id", "endpoint", "starts_at", "ends_at")
NAMES = ("heartbeat-and-fence", "misroute", "identity", "controller")


def _read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module", autouse=True)
def _examples_present():
    if not EXAMPLES.is_dir():
        pytest.skip(f"worked examples not found at {EXAMPLES}")


@pytest.mark.parametrize("name", NAMES)
def test_replay_reproduces_worked_example(spark, test_config, tmp_path, name):
    out = tmp_path / "alerts.jsonl"
    summary = replay_file(EXAMPLES / f"{name}.jsonl", out, test_config)
    got = [{k: a[k] for k in DECIDING} for a in _read(out)]
    assert got == _read(EXAMPLES / f"{name}.expected.jsonl")
    assert summary.lines == len(_read(EXAMPLES / f"{name}.jsonl"))
    assert not summary.quarantined
    for alert in _read(out):
        assert alert["schema"] == "fleetwatch.alert/v1"
        assert len(alert["alert_id"]) == 32 and alert["summary"]


def test_replay_is_byte_identical_and_quarantines_bad_lines(spark, test_config, tmp_path):
    good = (EXAMPLES / "identity.jsonl").read_text().splitlines()
    bad = [
        "this is not json",
        json.dumps({"schema": "fleetwatch.event/v1", "type": "broker_gossip", "ts": 1, "source": "x",
                    "cluster_id": None}),
        json.dumps({"schema": "fleetwatch.event/v1", "type": "broker_heartbeat", "ts": 1764000002000,
                    "source": "agent", "cluster_id": "LogLogLogLogLogLogLogA", "kind": "heartbeat",
                    "broker_epoch": 3}),
        json.dumps({"schema": "fleetwatch.event/v2", "type": "broker_state"}),
    ]
    mixed = good[:5] + bad[:2] + good[5:20] + bad[2:] + good[20:]
    events = tmp_path / "mixed.jsonl"
    events.write_text("\n".join(mixed) + "\n")

    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    summary = replay_file(events, first, test_config, store=store)
    replay_file(events, second, test_config)

    assert first.read_bytes() == second.read_bytes()
    expected = _read(EXAMPLES / "identity.expected.jsonl")
    assert [{k: a[k] for k in DECIDING} for a in _read(first)] == expected
    assert summary.lines == len(mixed)
    assert summary.quarantined == {"not_json": 1, "unknown_type": 1, "missing_field:broker_id": 1,
                                   "unknown_schema": 1}
    with store.engine.connect() as conn:
        reasons = dict(conn.execute(select(quarantine.c.reason, func.count()).group_by(quarantine.c.reason)).all())
        assert reasons == summary.quarantined
        assert conn.scalar(select(func.count()).select_from(alert_history)) == len(expected)
        assert conn.scalar(select(func.count()).select_from(outbox)) == len(expected)
        firing = conn.execute(select(alerts.c.rule).where(alerts.c.status == "firing")).scalars().all()
        assert firing == ["cluster.id_duplicate"]


def _bootstrap(ts: int, target: str, cluster_id: str) -> str:
    return json.dumps({"schema": "fleetwatch.event/v1", "type": "metadata_response", "ts": ts, "source": "test",
                       "cluster_id": cluster_id, "target": target, "endpoint": f"{target}1:9092", "expected": None,
                       "responder_node_id": None, "controller_id": 1, "error": None, "latency_ms": 2,
                       "brokers": [{"node_id": 1, "host": f"{target}1", "port": 9092}]})


def test_the_job_drops_the_state_of_what_went_quiet_for_longer_than_the_ttl(spark, test_config, tmp_path):
    # Target "gone" (cluster G) is probed for 10 s, then never again; target "live" (cluster L)
    # every 100 s for 1,000 s. With a 700 s TTL the job forgets G's shards once the watermark is
    # past their last event + 700 s: their buckets' state rows are cleared, in both passes (G's
    # advertisement of gone1:9092 and target gone's hold of G end with their leases).
    ttl_ms, start = 700_000, 1_764_000_000_000
    config = test_config.model_copy(update={"rules": test_config.rules.model_copy(update={"state_ttl_ms": ttl_ms})})
    gone, live = "GoneGoneGoneGoneGoneGA", "LiveLiveLiveLiveLiveLA"
    events = [_bootstrap(start + s * 1000, "gone", gone) for s in range(0, 11, 5)]
    events += [_bootstrap(start + s * 1000, "live", live) for s in range(0, 1001, 100)]
    events.sort(key=lambda line: json.loads(line)["ts"])
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(events) + "\n")

    buckets = config.spark.state_buckets
    live_buckets = [{bucket_of(shard, buckets) for shard in ("target:live", f"cluster:{live}")},
                    {bucket_of(shard, buckets) for shard in ("addr:live1:9092", f"dup:{live}")}]
    gone_buckets = [{bucket_of(shard, buckets) for shard in ("target:gone", f"cluster:{gone}")},
                    {bucket_of(shard, buckets) for shard in ("addr:gone1:9092", f"dup:{gone}")}]
    for live_pass, gone_pass in zip(live_buckets, gone_buckets, strict=True):
        assert not live_pass & gone_pass, "the test needs G's shards in buckets of their own"

    summary = replay_file(path, None, config)
    assert summary.state_rows == sum(map(len, live_buckets))
    assert not summary.alerts


def test_cli_replay_refuses_bad_config_in_one_line(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("rules: {session_timeout_ms: soon}\nsurprise: 1\n")
    result = subprocess.run(
        [sys.executable, "-m", "streaming.cli", "replay", str(EXAMPLES / "misroute.jsonl"),
         "--alerts-out", str(tmp_path / "out.jsonl"), "--config", str(config)],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "rules.session_timeout_ms" in lines[0] and "surprise: unknown key" in lines[0]
    assert not (tmp_path / "out.jsonl").exists()


def test_cli_replay_does_not_warn_about_state_it_has_not_made_yet(tmp_path):
    # Each new bucket of detection state made Spark warn "Value state bucket doesn't contain a
    # value" (16 lines per start): nothing is wrong, and at 3 a.m. it reads as if something were.
    result = subprocess.run(
        [sys.executable, "-m", "streaming.cli", "replay", str(EXAMPLES / "identity.jsonl"),
         "--alerts-out", str(tmp_path / "out.jsonl")],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert _read(tmp_path / "out.jsonl")
    assert "doesn't contain a value" not in result.stderr
