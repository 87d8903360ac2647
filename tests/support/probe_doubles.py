"""Test doubles for the probe tests (no tests here): real Tansu processes, a Kafka 4.4-like fake
broker, a blackhole listener and a TLS terminator; and the probe tests' small helpers (a target, the
events' contract check, the responses of a round). Imported by the probe tests in tests/collect/."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from streaming.bus import answers_api_versions, tansu_binary
from streaming.collect import probe
from streaming.collect.probe import Target
from streaming.collect.protocol import decode_request, encode_response
from streaming.plumbing.ports import free_port
from streaming.records.contract import event_from_dict
from streaming.workshop.polling import poll

HOST = "127.0.0.1"


class Tansu:
    """One Tansu broker process on 127.0.0.1 that we started (and only we stop)."""

    def __init__(self, cluster_id: str, port: int | None = None, *, advertised_port: int | None = None,
                 log_dir: Path) -> None:
        self.cluster_id = cluster_id
        self.port = port or free_port()
        self.advertised_port = advertised_port or self.port
        self.log_dir = log_dir
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    def start(self, cluster_id: str | None = None, timeout_s: float = 20.0) -> Tansu:
        if cluster_id is not None:
            self.cluster_id = cluster_id
        log = (self.log_dir / f"tansu-{self.port}-{self.cluster_id}.log").open("ab")
        self.process = subprocess.Popen(
            [str(tansu_binary()), "broker", "--cluster-id", self.cluster_id,
             "--listener-url", f"tcp://{HOST}:{self.port}",
             "--advertised-listener-url", f"tcp://{HOST}:{self.advertised_port}",
             "--storage-engine", "memory://tansu/"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "NO_COLOR": "1"}, start_new_session=True)
        log.close()
        def ready() -> bool:
            if answers_api_versions(self.port, timeout_s=1.0):
                return True
            if self.process.poll() is not None:
                raise RuntimeError(f"Tansu {self.cluster_id} exited before it answered on {self.address}")
            return False

        try:
            poll(ready, timeout_s, f"Tansu {self.cluster_id} to answer on {self.address}", interval_s=0.02,
                 retry_on=(), error=RuntimeError)
        except RuntimeError:
            self.kill()
            raise
        return self

    def kill(self) -> None:
        """SIGKILL: a crash. Returns once the process is gone (the port then refuses)."""
        self._signal(signal.SIGKILL)

    def stop(self) -> None:
        self._signal(signal.SIGTERM)

    def _signal(self, sig: signal.Signals) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, sig)
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()


class Blackhole:
    """A listening socket that never accepts: TCP connects (the kernel's backlog), then silence."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind((HOST, 0))
        self.sock.listen(1024)
        self.port = self.sock.getsockname()[1]

    def close(self) -> None:
        self.sock.close()


def refused_port() -> int:
    """A port nothing listens on (bound then released)."""
    return free_port()


# --------------------------------------------------------------------------- fake Kafka 4.4

KIP_1242_TABLE = {18: (0, 5), 3: (0, 13), 17: (0, 1), 36: (0, 2), 55: (0, 2), 60: (0, 2), 32: (1, 4), 75: (0, 0)}


class FakeKafka:
    """A broker that answers like Kafka 4.4 (KIP-1242, KIP-1073, KRaft) for the probe's requests.

    `cluster.brokers` is the shared broker list of its cluster: dicts with node_id, port and
    fenced. Metadata lists the unfenced ones and, as KRaft does, names a random live broker as
    ControllerId; DescribeQuorum names `quorum_leader` and the observers' fetch times.
    """

    def __init__(self, cluster: FakeCluster, node_id: int, *, sasl: tuple[str, str] | None = None,
                 v5_error: int | None = None, drop_v5_times: int = 0, pages: bool = True) -> None:
        self.cluster = cluster
        self.pages = pages  # offers DescribeTopicPartitions (Kafka 3.8+); else the layout comes from Metadata
        self.node_id = node_id
        self.sasl = sasl
        self.v5_error = v5_error  # advertises ApiVersions v5 but answers it with this error (35, 42)
        self.drop_v5_times = drop_v5_times  # closes the connection on the first N v5 requests (a restart)
        self.port = 0
        self.requests: list[tuple[str, int, dict[str, Any]]] = []  # over all connections
        self.connections: list[list[tuple[str, int]]] = []  # (api, version) per connection
        self._server: asyncio.Server | None = None
        self._turn = 0

    async def start(self) -> FakeKafka:
        self._server = await asyncio.start_server(self._serve, HOST, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        authenticated = self.sasl is None
        seen: list[tuple[str, int]] = []
        self.connections.append(seen)
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big")
                msg, version, correlation, _, body = decode_request(await reader.readexactly(size))
                api = msg.name.removesuffix("Request")
                self.requests.append((api, version, body))
                seen.append((api, version))
                if not authenticated and api not in ("ApiVersions", "SaslHandshake", "SaslAuthenticate"):
                    return  # Kafka closes an unauthenticated connection that skips SASL
                if self.drop_v5_times and api == "ApiVersions" and version >= 5:
                    self.drop_v5_times -= 1
                    return
                answer = getattr(self, f"_{api}")(version, body)
                if api == "SaslAuthenticate" and answer["ErrorCode"] == 0:
                    authenticated = True
                if api == "ApiVersions" and answer["ErrorCode"] == 35:
                    version = 0  # Kafka answers UNSUPPORTED_VERSION to ApiVersions in the v0 layout
                writer.write(encode_response(f"{api}Response", version, correlation, answer))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def _ApiVersions(self, version: int, body: dict[str, Any]) -> dict[str, Any]:
        if version >= 5 and self.v5_error is not None:
            return {"ErrorCode": self.v5_error, "ApiKeys": []}
        if version >= 5 and body["ClusterId"] is not None and (
                body["ClusterId"] != self.cluster.cluster_id or body["NodeId"] != self.node_id):
            return {"ErrorCode": 129, "ApiKeys": []}  # KIP-1242: REBOOTSTRAP_REQUIRED
        table = [{"ApiKey": k, "MinVersion": lo, "MaxVersion": hi} for k, (lo, hi) in KIP_1242_TABLE.items()
                 if self.pages or k != 75]
        return {"ErrorCode": 0, "ApiKeys": table}

    def _Metadata(self, version: int, body: dict[str, Any]) -> dict[str, Any]:
        live = [b for b in self.cluster.brokers if not b["fenced"]]
        self._turn += 1
        return {"ClusterId": self.cluster.cluster_id, "ControllerId": live[self._turn % len(live)]["node_id"],
                "Brokers": [{"NodeId": b["node_id"], "Host": HOST, "Port": b["port"], "Rack": b.get("rack")}
                            for b in live],
                "Topics": [] if body["Topics"] is not None else [
                    {"ErrorCode": 0, "Name": name, "Partitions": self._partitions(name, 0, len(parts))}
                    for name, parts in sorted(self.cluster.partitions.items())]}

    def _partitions(self, topic: str, start: int, stop: int) -> list[dict[str, Any]]:
        return [{"ErrorCode": 0, "PartitionIndex": p, "LeaderId": leader, "ReplicaNodes": replicas, "IsrNodes": isr}
                for p, leader, replicas, isr in self.cluster.partitions[topic][start:stop]]

    def _DescribeTopicPartitions(self, version: int, body: dict[str, Any]) -> dict[str, Any]:
        # Kafka's paging: every topic in name order from the cursor on, at most the limit of partitions.
        names, cursor, room = sorted(self.cluster.partitions), body["Cursor"], body["ResponsePartitionLimit"]
        first, start = (names.index(cursor["TopicName"]), cursor["PartitionIndex"]) if cursor else (0, 0)
        topics, next_cursor = [], None
        for name in names[first:]:
            parts = self.cluster.partitions[name]
            if room == 0:
                next_cursor = {"TopicName": name, "PartitionIndex": start}
                break
            taken = self._partitions(name, start, start + room)
            topics.append({"ErrorCode": 0, "Name": name, "Partitions": taken})
            room -= len(taken)
            if start + len(taken) < len(parts):
                next_cursor = {"TopicName": name, "PartitionIndex": start + len(taken)}
                break
            start = 0
        return {"Topics": topics, "NextCursor": next_cursor}

    def _DescribeConfigs(self, version: int, body: dict[str, Any]) -> dict[str, Any]:
        def value(kind: int, name: str) -> str | None:
            if kind == 4:
                return str(self.cluster.default_min_isr) if name == str(self.node_id) else None
            return str(self.cluster.min_isr.get(name, self.cluster.default_min_isr))

        return {"Results": [{"ErrorCode": 0 if value(r["ResourceType"], r["ResourceName"]) else 42,
                             "ResourceType": r["ResourceType"], "ResourceName": r["ResourceName"],
                             "Configs": [{"Name": "min.insync.replicas", "Value": value(r["ResourceType"],
                                                                                      r["ResourceName"])}]}
                            for r in body["Resources"]]}

    def _DescribeCluster(self, version: int, body: dict[str, Any]) -> dict[str, Any]:
        listed = [b for b in self.cluster.brokers if body["IncludeFencedBrokers"] or not b["fenced"]]
        return {"ClusterId": self.cluster.cluster_id, "ControllerId": listed[0]["node_id"],
                "Brokers": [{"BrokerId": b["node_id"], "Host": HOST, "Port": b["port"], "Rack": b.get("rack"),
                             "IsFenced": b["fenced"]} for b in listed]}

    def _DescribeQuorum(self, version: int, body: dict[str, Any]) -> dict[str, Any]:
        # As Kafka 4.4 answers (measured): brokers are observers in the separate layout, and the
        # leader's own voter entry carries the time of the answer, on the leader's clock.
        observers = [{"ReplicaId": node, "LogEndOffset": 100, "LastFetchTimestamp": ts,
                      "LastCaughtUpTimestamp": ts} for node, ts in self.cluster.last_fetch().items()]
        now = self.cluster.leader_clock()
        return {"Topics": [{"TopicName": "__cluster_metadata", "Partitions": [{
            "PartitionIndex": 0, "LeaderId": self.cluster.quorum_leader, "LeaderEpoch": self.cluster.leader_epoch,
            "HighWatermark": 100,
            "CurrentVoters": [{"ReplicaId": self.cluster.quorum_leader, "LogEndOffset": 100,
                               "LastFetchTimestamp": now, "LastCaughtUpTimestamp": now}],
            "Observers": observers}]}]}

    def _SaslHandshake(self, version: int, body: dict[str, Any]) -> dict[str, Any]:
        return {"ErrorCode": 0 if body["Mechanism"] == "PLAIN" else 33, "Mechanisms": ["PLAIN"]}

    def _SaslAuthenticate(self, version: int, body: dict[str, Any]) -> dict[str, Any]:
        assert self.sasl is not None
        user, password = self.sasl
        if body["AuthBytes"] == b"\0" + user.encode() + b"\0" + password.encode():
            return {"ErrorCode": 0, "AuthBytes": b""}
        return {"ErrorCode": 58, "ErrorMessage": "Authentication failed: Invalid username or password"}


class FakeCluster:
    """`last_fetch` and `leader_clock` (the leader's wall clock, ms; default this machine's) are on
    the leader's clock; `leader_epoch` is DescribeQuorum's LeaderEpoch."""

    def __init__(self, cluster_id: str, *, quorum_leader: int = 3001,
                 last_fetch: Callable[[], dict[int, int]] | None = None,
                 leader_clock: Callable[[], int] | None = None, leader_epoch: int = 3) -> None:
        self.cluster_id = cluster_id
        self.quorum_leader = quorum_leader
        self.leader_epoch = leader_epoch
        self.brokers: list[dict[str, Any]] = []
        # The partition layout: topic -> [(partition, leader, replicas, isr)], and min.insync.replicas.
        self.partitions: dict[str, list[tuple[int, int, list[int], list[int]]]] = {}
        self.min_isr: dict[str, int] = {}
        self.default_min_isr = 1
        self.last_fetch = last_fetch or dict
        self.leader_clock = leader_clock or (lambda: int(time.time() * 1000))


# --------------------------------------------------------------------------- TLS

def self_signed_cert(directory: Path) -> tuple[Path, Path] | None:
    """A cert for 127.0.0.1 made with the openssl CLI; None when openssl is missing."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    try:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                        "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                        "-addext", "subjectAltName=IP:127.0.0.1"],
                       check=True, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return cert, key


async def tls_terminator(cert: Path, key: Path, upstream_port: int) -> asyncio.Server:
    """TLS on a new port, plain TCP to `upstream_port` (a TLS listener in front of Tansu)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(HOST, upstream_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    return await asyncio.start_server(serve, HOST, 0, ssl=context)


async def garbage_server() -> asyncio.Server:
    """Answers every connection with bytes that are neither TLS nor Kafka (an HTTP server, say)."""
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        writer.close()

    return await asyncio.start_server(serve, HOST, 0)


def target(name: str, *addresses: str, **kw: Any) -> Target:
    """A probe target bootstrapped at `addresses` ("host:port")."""
    return Target(name=name, bootstrap=tuple(probe.parse_address(a) for a in addresses), **kw)


def valid(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`events`, once each has passed the contract (raises on any violation)."""
    for ev in events:
        event_from_dict(ev)
    return events


def responses(events: list[dict[str, Any]], **match: Any) -> list[dict[str, Any]]:
    """The metadata responses among `events` whose fields equal `match`."""
    return [ev for ev in events if ev["type"] == "metadata_response"
            and all(ev.get(k) == v for k, v in match.items())]


Emitted = list[tuple[float, list[dict[str, Any]]]]  # what a live probe emitted: (monotonic time, events) per emit


def rounds_of(emitted: Emitted, target: str) -> Emitted:
    """The rounds of `target` among what a live probe emitted: each round's events, up to its
    `collector_round`, with the time that end was emitted. A round's answers are emitted as they come,
    the rest at its end; a target's rounds never overlap."""
    rounds, current = [], []
    for at, events in emitted:
        for ev in events:
            if ev.get("target") != target or ev["type"] == "quorum_reading":  # readings are apart from rounds
                continue
            current.append(ev)
            if ev["type"] == "collector_round":
                rounds.append((at, current))
                current = []
    return rounds

