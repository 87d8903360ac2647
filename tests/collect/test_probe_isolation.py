"""The probe isolates targets (issue 26, point 4): a hostile or broken cluster costs its own round,
never another target's.

A hostile cluster is a Kafka-protocol server on 127.0.0.1 (streaming/workshop/hostile_kafka.py, real
protocol bytes, served from its own threads) advertising hundreds of black holes (listening sockets
that never accept) with a big answer; the healthy target beside it is the session's real Kafka 4.4
cluster where timing matters, a Kafka 4.4-like fake elsewhere.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import socket
import threading
import time
from typing import Any

import pytest
from support.probe_doubles import FakeCluster, FakeKafka, refused_port, responses, rounds_of, target, valid

import streaming.collect.protocol as protocol
from streaming.collect import probe
from streaming.collect.probe import ProbeOptions, Prober
from streaming.collect.protocol import Security
from streaming.workshop.hostile_kafka import HOST, BlackHoles, HostileKafka, SlowNames

T0 = 1_764_000_000_000



@pytest.mark.real_kafka
def test_a_hostile_cluster_beside_a_real_one_leaves_its_rounds_on_time(healthy_real_kafka):
    """300 black holes and a 150 kB answer from one cluster; the real cluster's rounds stay on time.

    Before the isolation the black holes took every one of the 256 shared slots for the whole
    timeout (and the answer was decoded on the event loop): the real cluster's endpoints waited
    at least `timeout_ms` (2 s) in the hostile cluster's first round."""
    healthy_real_kafka.watched_s()  # the session's real cluster is up (it is probed meanwhile)
    real = healthy_real_kafka.cluster
    options = ProbeOptions(interval_ms=3000, timeout_ms=2000, source="probe-isolation")
    holes = BlackHoles(300)
    hostile = HostileKafka(advertised=holes.addresses, answer_bytes=150_000).start()
    try:
        prober = Prober([target("hostile", hostile.address), target("real", *real.bootstrap)], options)
        emitted: list[tuple[float, list[dict[str, Any]]]] = []

        def emit(events: list[dict[str, Any]]) -> None:
            emitted.append((time.monotonic(), events))

        async def run() -> float:
            started = asyncio.get_running_loop().time()  # the loop's clock is time.monotonic()
            await prober.run(emit, rounds=2)
            return started

        started = asyncio.run(run())
    finally:
        hostile.stop()
        holes.close()
    # The real cluster's rounds, each when its end was published (its quorum readings are apart from them).
    real_rounds = rounds_of(emitted, "real")
    lateness_ms = [int((at - (started + k * options.interval_ms / 1000)) * 1000)
                   for k, (at, _) in enumerate(real_rounds)]
    print(f"\nthe real cluster's rounds were published {lateness_ms} ms after their ticks")
    assert len(real_rounds) == 2, "a round of the real cluster was skipped: the previous one was still busy"
    for _, events in real_rounds:
        answered = responses(valid(events))
        assert len(answered) == 1 + len(real.bootstrap) and {ev["error"] for ev in answered} == {None}
    # Before, the black holes held every shared slot for a whole timeout: lateness >= timeout_ms.
    assert max(lateness_ms) < options.timeout_ms * 3 / 4, lateness_ms
    # The hostile cluster had its rounds too, within its own limits.
    hostile_events = [ev for _, evs in emitted for ev in evs if ev.get("target") == "hostile"]
    (boot, *_) = responses(hostile_events, expected=None)
    assert boot["error"] is None and boot["endpoints_not_probed"]["over_cap"] == 300 + 1 - 256


# ------------------------------------------------------------------ name lookups


def test_a_target_whose_names_do_not_resolve_leaves_another_targets_lookups_alone(monkeypatch):
    """80 advertised names whose lookups block 8 s; a healthy target reached by name ("localhost",
    bootstrap and endpoint) answers every round beside it.

    Before, one pool of 64 lookup threads served every target, and a lookup abandoned at its
    exchange's deadline kept its thread: after two waves of the hostile target's exchanges (32
    each, `target_concurrency`) all 64 were blocked, and the healthy target's lookups waited behind
    them until TIMEOUT: of its 6 rounds, 2 answered, 1 timed out and 3 were skipped (still busy)."""
    slow = SlowNames(".slow.test", hold_s=8.0)
    # The only stand-in: the lookup function the client calls. Every other name goes to the real one.
    monkeypatch.setattr(socket, "getaddrinfo", slow.getaddrinfo)
    options = ProbeOptions(interval_ms=1000, timeout_ms=1500, source="probe-dns")
    hostile = HostileKafka(advertised=slow.names(80, port=9092)).start()
    healthy = HostileKafka("healthy-cluster", advertise_self=False)
    healthy.advertised = [("localhost", healthy.port)]
    healthy.start()
    emitted: list[tuple[float, list[dict[str, Any]]]] = []

    def emit(events: list[dict[str, Any]]) -> None:
        emitted.append((time.monotonic(), events))
        if len(rounds_of(emitted, "healthy")) == 6:
            slow.release()  # the test is done: the hostile target's last round need not last

    try:
        prober = Prober([target("slow-dns", hostile.address), target("healthy", f"localhost:{healthy.port}")],
                        options)
        asyncio.run(prober.run(emit, rounds=6))
    finally:
        slow.release()
        hostile.stop()
        healthy.stop()
    rounds = [responses(valid(events)) for _, events in rounds_of(emitted, "healthy")]
    errors = [sorted({str(ev["error"]) for ev in answered}) for answered in rounds]
    print(f"\nthe healthy target's rounds: {errors}; lookups blocked at once at most: {slow.most_at_once}")
    assert len(rounds) == 6, "a round of the healthy target was skipped: the previous one was still busy"
    assert all(len(answered) == 2 and {ev["error"] for ev in answered} == {None} for answered in rounds), errors
    # The hostile target's names blocked at most its own share of the lookup threads.
    assert 0 < slow.most_at_once <= protocol.LOOKUPS_PER_TARGET


# ------------------------------------------------------------------ the endpoint cap


def test_the_endpoint_cap_keeps_the_bootstrap_then_the_most_recently_advertised(caplog):
    a, b, c, d, e = (refused_port() for _ in range(5))
    hostile = HostileKafka(advertised=[(HOST, a), (HOST, b), (HOST, c)]).start()
    options = ProbeOptions(timeout_ms=2000, source="probe-test", max_endpoints=3)
    prober = Prober([target("capped", hostile.address, forget_after_ms=60_000)], options)

    def probed(events: list[dict[str, Any]]) -> list[str]:
        return sorted(ev["endpoint"] for ev in responses(valid(events)) if ev["expected"])

    try:
        with caplog.at_level(logging.INFO, logger="streaming.collect.probe"):
            first = prober.probe_round(T0)
            # The bootstrap address (node 1 advertises itself) first, then the answer's order.
            assert probed(first) == sorted([hostile.address, f"{HOST}:{a}", f"{HOST}:{b}"])
            assert responses(first, expected=None)[0]["endpoints_not_probed"] == {"over_cap": 1, "invalid": []}
            hostile.advertise([(HOST, d)])
            # d is the newest; a and b were advertised a round ago and are kept for forget_after_ms
            # as far as the cap allows: a, listed first, stays.
            assert probed(prober.probe_round(T0 + 5000)) == sorted([hostile.address, f"{HOST}:{d}", f"{HOST}:{a}"])
            hostile.advertise([(HOST, e)])
            third = prober.probe_round(T0 + 10000)
            assert probed(third) == sorted([hostile.address, f"{HOST}:{e}", f"{HOST}:{d}"])
            hostile.advertise([])
            fourth = prober.probe_round(T0 + 15000)  # within the cap again: a round like any other
            assert probed(fourth) == sorted([hostile.address, f"{HOST}:{e}", f"{HOST}:{d}"])
            assert "endpoints_not_probed" not in responses(fourth, expected=None)[0]
    finally:
        hostile.stop()
    over = [r for r in caplog.records if "max_endpoints_per_target" in r.getMessage()]
    assert [r.levelname for r in over] == ["WARNING", "INFO"]  # going over said once, and coming back
    assert over[0].target == "capped" and over[0].over_cap == 1


# ------------------------------------------------------------------ invalid advertised addresses


def test_invalid_advertised_addresses_are_refused_one_by_one_and_the_rest_is_probed(caplog):
    refused = refused_port()
    bad = [(HOST, 70000), (HOST, 0), ("", 9092), ("h" * 300, 9092)]
    with HostileKafka(advertised=[(HOST, refused), *bad]) as hostile, \
            caplog.at_level(logging.WARNING, logger="streaming.collect.probe"):
        prober = Prober([target("odd", hostile.address)], ProbeOptions(timeout_ms=2000, source="probe-test"))
        rounds = [valid(prober.probe_round(T0 + k * 5000)) for k in range(2)]
    for events in rounds:
        probed = {ev["endpoint"]: ev["error"] for ev in responses(events) if ev["expected"]}
        assert probed == {hostile.address: None, f"{HOST}:{refused}": "CONNECTION_REFUSED"}
        (boot,) = responses(events, expected=None)
        assert boot["error"] is None
        assert len(boot["endpoints_not_probed"]["invalid"]) == 4
        assert any("70000" in what for what in boot["endpoints_not_probed"]["invalid"])
        # The overlong host would make the whole event fail the contract: it is left out of the list.
        assert {b["host"] for b in boot["brokers"]} == {HOST, ""}
    said = [r for r in caplog.records if "not probed" in r.getMessage()]
    assert len(said) == 1  # once, not once per round nor per endpoint
    assert said[0].target == "odd" and len(said[0].invalid) == 4


# ------------------------------------------------------------------ SCRAM iterations


def _probe_in_thread(prober: Prober, limit_s: float) -> tuple[list[dict[str, Any]] | None, float]:
    """One round in a daemon thread: a probe stuck in a key derivation cannot hang the test."""
    result: list[list[dict[str, Any]]] = []
    started = time.monotonic()
    thread = threading.Thread(target=lambda: result.append(prober.probe_round(T0)), daemon=True)
    thread.start()
    thread.join(limit_s)
    return (result[0] if result else None), time.monotonic() - started


@pytest.mark.parametrize("iterations", [1, 4095, 16385, 2**31 - 1])
def test_scram_iterations_outside_kafkas_bounds_are_refused_before_any_computation(iterations):
    security = Security(protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512", username="probe",
                        password="s3cret")
    with HostileKafka(scram_iterations=iterations) as hostile:
        prober = Prober([target("scram", hostile.address, security=security)],
                        ProbeOptions(timeout_ms=2000, source="probe-test"))
        events, took = _probe_in_thread(prober, limit_s=10)
    assert events is not None, f"the probe was still deriving a key after {took:.1f} s"
    (boot,) = responses(valid(events))
    assert boot["error"] == "AUTH_FAILED"
    assert f"{iterations} iterations" in boot["error_detail"] and "4096..16384" in boot["error_detail"]
    assert hostile.scram_first_messages == 1 and hostile.proofs_received == 0  # no proof left our hands
    # 2^31-1 rounds of PBKDF2 take minutes; a refusal takes one exchange (bounded loosely: on a
    # machine at load 30 that exchange alone has taken more than a second).
    assert took < 5.0


def test_scram_iterations_within_kafkas_bounds_are_computed():
    security = Security(protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256", username="probe",
                        password="s3cret")
    with HostileKafka(scram_iterations=4096) as hostile:
        prober = Prober([target("scram", hostile.address, security=security)],
                        ProbeOptions(timeout_ms=2000, source="probe-test"))
        events, _ = _probe_in_thread(prober, limit_s=10)
    assert events is not None
    (boot,) = responses(valid(events))
    assert boot["error"] == "AUTH_FAILED" and hostile.proofs_received == 1  # refused by the server, not by us


_SCRAM_NOT_SCRAM = {
    "iterations-superscript-two": {"scram_iterations": "²"},  # str.isdigit() is true, int() refuses it
    # int() reads it as 4096: before, the probe derived a key and sent its proof to such a server.
    "iterations-arabic-indic": {"scram_iterations": "٤٠٩٦"},
    "first-not-utf8": {"scram_iterations": 4096, "scram_extra": b",x=\xff\xfe"},
    "final-not-utf8": {"scram_iterations": 4096, "scram_final": b"v=\xff\xfe"},
    "final-not-base64": {"scram_iterations": 4096, "scram_final": b"v=not base64!"},
}


@pytest.mark.parametrize("answer", list(_SCRAM_NOT_SCRAM))
def test_a_scram_answer_that_is_not_scram_fails_authentication_in_one_line(answer, caplog):
    """Before, the client's parse raised ValueError or UnicodeDecodeError (binascii.Error for the
    base64), which reached the prober's catch-all: PROTOCOL_ERROR and a traceback per endpoint and
    round ("unexpected probe failure"), up to 256 every 5 s."""
    security = Security(protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256", username="probe",
                        password="s3cret")
    with HostileKafka(**_SCRAM_NOT_SCRAM[answer]) as hostile, \
            caplog.at_level(logging.DEBUG, logger="streaming.collect"):
        prober = Prober([target("scram", hostile.address, security=security)],
                        ProbeOptions(timeout_ms=2000, source="probe-test"))
        rounds = [_probe_in_thread(prober, limit_s=10)[0] for _ in range(2)]
    for events in rounds:
        assert events is not None
        (boot,) = responses(valid(events))
        assert boot["error"] == "AUTH_FAILED", boot
        assert "SCRAM" in boot["error_detail"] and "\n" not in boot["error_detail"]
    assert [r.getMessage() for r in caplog.records if r.exc_info or r.levelno >= logging.WARNING] == []
    # The second round's failure is the first's: a client-first message each, no proof after a bad first message.
    assert hostile.scram_first_messages == 2
    assert hostile.proofs_received == (2 if "final" in answer else 0)


# ------------------------------------------------------------------ the frame-size cap


def test_an_answer_over_the_frame_cap_fails_that_exchange_only():
    async def scenario(hostile: HostileKafka) -> list[dict[str, Any]]:
        cluster = FakeCluster("fine-cluster")
        fine = await FakeKafka(cluster, 1).start()
        cluster.brokers = [{"node_id": 1, "port": fine.port, "fenced": False}]
        prober = Prober([target("huge", hostile.address), target("fine", f"{HOST}:{fine.port}")],
                        ProbeOptions(timeout_ms=2000, source="probe-test"))
        try:
            return await prober.probe_round_async(T0)
        finally:
            await fine.stop()

    # Over the default cap (1 MiB), far under the old one (64 MiB).
    with HostileKafka(answer_bytes=1_300_000) as hostile:
        events = valid(asyncio.run(scenario(hostile)))
    (huge,) = responses(events, target="huge")
    assert huge["error"] == "RESPONSE_TOO_LARGE"
    assert "Metadata" in huge["error_detail"] and "1048576" in huge["error_detail"]
    assert {ev["error"] for ev in responses(events, target="fine")} == {None}
    assert len(responses(events, target="fine")) == 2


# ------------------------------------------------------------------ the limits in the config


def test_the_probe_limits_are_configured_and_checked_with_file_and_line(tmp_path):
    from streaming.config import ConfigError, load_config
    from streaming.ops import check_config

    path = tmp_path / "fleetwatch.yaml"
    path.write_text("probe:\n"                                  # 1
                    "  target_concurrency: 0\n"                 # 2
                    "  max_endpoints_per_target: many\n"        # 3
                    "  max_response_bytes: 1024\n"              # 4
                    "  max_endpoints: 5\n")                     # 5
    assert [p.render() for p in check_config.check_file(path)] == [
        f"{path}:2: error: probe.target_concurrency: Input should be greater than or equal to 1",
        f"{path}:3: error: probe.max_endpoints_per_target: Input should be a valid integer",
        f"{path}:4: error: probe.max_response_bytes: Input should be greater than or equal to 65536",
        f"{path}:5: error: probe.max_endpoints: unknown key",
    ]
    with pytest.raises(ConfigError, match=r"probe\.target_concurrency"):
        load_config(path)
    path.write_text("probe: {target_concurrency: 4, max_endpoints_per_target: 3, max_response_bytes: 65536}\n"
                    "clusters: [{name: a, bootstrap: ['127.0.0.1:1']}]\n")
    args = argparse.Namespace(config=str(path), once=True, rounds=None, out=str(tmp_path / "o.jsonl"),
                              bootstrap_servers=None, interval_ms=5000, timeout_ms=1000, concurrency=2,
                              target=None, source=None)
    with pytest.raises(ConfigError, match=r"--concurrency \(2\) must be at least probe.target_concurrency \(4\)"):
        probe.command(args)
