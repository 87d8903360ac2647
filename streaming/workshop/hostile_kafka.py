"""Kafka-protocol servers that misbehave, for the probe's isolation tests and bench/hostile_probe.py
(no tests here).

Everything is served on 127.0.0.1 with real protocol bytes (the project's codec, from Kafka's JSON
message specs), from threads of the server's own, so that none of its work runs on the prober's
event loop:

- `HostileKafka`: answers ApiVersions and Metadata like a Kafka 3.x broker (no KIP-1242, no
  DescribeCluster v2, no DescribeQuorum), SASL PLAIN or SCRAM when asked; its Metadata answer
  advertises whatever it is given (black holes, ports outside 1..65535, empty or overlong hosts)
  and can be padded with topics to a given size (topics cost the decoder as much per byte as
  brokers do, and are never probed). With `scram_iterations` it opens SCRAM with that iteration
  count (any text: `"²"` is no integer), records whether the client went on to send its proof, and
  refuses it, or answers it with `scram_final`; `scram_extra` is appended to its first message
  as it is (bytes that are not UTF-8).
- `BlackHoles`: listening sockets that never accept: TCP connects (the kernel's backlog), then
  nothing comes back, until the client gives up.
- `SlowNames`: a stand-in for `socket.getaddrinfo` whose lookups of names under one suffix block
  (a DNS server that does not answer), every other name resolved by the real function.
"""

from __future__ import annotations

import base64
import contextlib
import socket
import socketserver
import threading
from collections.abc import Sequence
from typing import Any

from streaming.collect.protocol import decode_request, encode_response

__all__ = ["HOST", "BlackHoles", "HostileKafka", "SlowNames"]

HOST = "127.0.0.1"
# What a Kafka 3.x broker offers of what the probe asks (no ApiVersions v5, no DescribeQuorum).
TABLE = {18: (0, 3), 3: (0, 12), 17: (0, 1), 36: (0, 2)}
METADATA_VERSION = 12
_TOPIC = {"ErrorCode": 0, "Name": "t", "TopicId": "AAAAAAAAAAAAAAAAAAAAAA", "IsInternal": False,
          "Partitions": [], "TopicAuthorizedOperations": 0}


class BlackHoles:
    """`count` listening sockets on 127.0.0.1 that never accept."""

    def __init__(self, count: int) -> None:
        self.sockets: list[socket.socket] = []
        try:
            for _ in range(count):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                self.sockets.append(sock)
                sock.bind((HOST, 0))
                sock.listen(4096)
        except BaseException:
            self.close()
            raise

    @property
    def addresses(self) -> list[tuple[str, int]]:
        return [(HOST, s.getsockname()[1]) for s in self.sockets]

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()
        self.sockets = []


class SlowNames:
    """`getaddrinfo` for `socket.getaddrinfo`: a name ending in `suffix` blocks its thread for
    `hold_s` (or until `release()`), then fails as an unanswered lookup does; any other name goes to
    the real function. Counts the lookups that blocked and how many block at once at most."""

    def __init__(self, suffix: str, hold_s: float) -> None:
        self.suffix, self.hold_s = suffix, hold_s
        self.blocked = 0
        self.most_at_once = 0
        self._now = 0
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._real = socket.getaddrinfo

    def names(self, count: int, port: int) -> list[tuple[str, int]]:
        """`count` advertisable (host, port) pairs whose lookups block."""
        return [(f"b{i}{self.suffix}", port) for i in range(count)]

    def getaddrinfo(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if not (isinstance(host, str) and host.endswith(self.suffix)):
            return self._real(host, port, *args, **kwargs)
        with self._lock:
            self.blocked += 1
            self._now += 1
            self.most_at_once = max(self.most_at_once, self._now)
        try:
            self._released.wait(self.hold_s)
        finally:
            with self._lock:
                self._now -= 1
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    def release(self) -> None:
        """Ends every blocked lookup now (they fail), and every later one at once."""
        self._released.set()


class HostileKafka:
    """A broker (node 1 of `cluster_id`) that advertises itself, then `advertised` as nodes 100, 101, ...

    `answer_bytes`: pad the Metadata answer with topics up to about this many bytes.
    `scram_iterations`: offer SCRAM-SHA-256/512 and answer the client's first message with this count
    (and `scram_extra` after it); `scram_final`: accept the proof with this server-final message.
    """

    def __init__(self, cluster_id: str = "hostile-cluster", *, advertised: Sequence[tuple[str, int]] = (),
                 answer_bytes: int = 0, scram_iterations: int | str | None = None, scram_extra: bytes = b"",
                 scram_final: bytes | None = None, advertise_self: bool = True) -> None:
        self.cluster_id = cluster_id
        self.advertised = list(advertised)
        self.answer_bytes = answer_bytes
        self.scram_iterations = scram_iterations
        self.scram_extra = scram_extra
        self.scram_final = scram_final
        self.advertise_self = advertise_self
        self.proofs_received = 0  # SCRAM client-final messages (with a proof) that reached us
        self.scram_first_messages = 0
        self.connections = 0
        self._metadata: bytes | None = None
        hostile = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                hostile._serve(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True
            request_queue_size = 1024

        self._server = Server((HOST, 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="hostile-kafka", daemon=True)

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    def start(self) -> HostileKafka:
        self._metadata = self._metadata_frame()
        self._thread.start()
        return self

    def advertise(self, advertised: Sequence[tuple[str, int]]) -> None:
        """From the next Metadata request on, advertise these (after itself) instead."""
        self.advertised = list(advertised)
        self._metadata = self._metadata_frame()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> HostileKafka:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _metadata_frame(self) -> bytes:
        brokers = [{"NodeId": 1, "Host": HOST, "Port": self.port, "Rack": None}] if self.advertise_self else []
        brokers += [{"NodeId": 100 + i, "Host": host, "Port": port, "Rack": None}
                    for i, (host, port) in enumerate(self.advertised)]
        body: dict[str, Any] = {"ClusterId": self.cluster_id, "ControllerId": 1, "Brokers": brokers, "Topics": []}
        frame = encode_response("MetadataResponse", METADATA_VERSION, 0, body)
        if self.answer_bytes > len(frame):
            per_topic = len(encode_response("MetadataResponse", METADATA_VERSION, 0, {**body, "Topics": [_TOPIC]}))
            per_topic -= len(frame)
            body["Topics"] = [_TOPIC] * ((self.answer_bytes - len(frame)) // per_topic)
            frame = encode_response("MetadataResponse", METADATA_VERSION, 0, body)
        return frame

    def _serve(self, sock: socket.socket) -> None:
        self.connections += 1
        reader = sock.makefile("rb")
        try:
            while True:
                head = reader.read(4)
                if len(head) < 4:
                    return
                payload = reader.read(int.from_bytes(head, "big"))
                msg, version, correlation, _, body = decode_request(payload)
                api = msg.name.removesuffix("Request")
                if api == "Metadata":
                    assert self._metadata is not None
                    sock.sendall(self._metadata[:4] + correlation.to_bytes(4, "big", signed=True) + self._metadata[8:])
                    continue
                answer = getattr(self, f"_{api}")(version, body)
                if answer is None:
                    return
                sock.sendall(encode_response(f"{api}Response", version, correlation, answer))
        except (OSError, ValueError):
            pass
        finally:
            with contextlib.suppress(OSError):
                reader.close()

    def _ApiVersions(self, version: int, body: dict[str, Any]) -> dict[str, Any]:
        return {"ErrorCode": 0, "ApiKeys": [{"ApiKey": k, "MinVersion": lo, "MaxVersion": hi}
                                            for k, (lo, hi) in TABLE.items()]}

    def _SaslHandshake(self, version: int, body: dict[str, Any]) -> dict[str, Any]:
        offered = ["SCRAM-SHA-256", "SCRAM-SHA-512"] if self.scram_iterations is not None else ["PLAIN"]
        return {"ErrorCode": 0 if body["Mechanism"] in offered else 33, "Mechanisms": offered}

    def _SaslAuthenticate(self, version: int, body: dict[str, Any]) -> dict[str, Any]:
        token: bytes = body["AuthBytes"]
        if self.scram_iterations is None:
            return {"ErrorCode": 58, "ErrorMessage": "Authentication failed"}
        if token.startswith(b"n,,"):  # the client's first message: answer with our iteration count
            self.scram_first_messages += 1
            attrs = dict(part.split("=", 1) for part in token[3:].decode().split(",") if "=" in part)
            salt = base64.b64encode(b"hostile-salt").decode()
            server_first = f"r={attrs['r']}hostile,s={salt},i={self.scram_iterations}"
            return {"ErrorCode": 0, "AuthBytes": server_first.encode() + self.scram_extra}
        self.proofs_received += 1  # the client-final message, with its proof
        if self.scram_final is not None:
            return {"ErrorCode": 0, "AuthBytes": self.scram_final}
        return {"ErrorCode": 58, "ErrorMessage": "Authentication failed during authentication"}
