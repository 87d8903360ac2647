"""A minimal asyncio Kafka client: one connection, a few requests, hard deadlines.

Only what the probe needs: framing and correlation ids, ApiVersions negotiation (with the
KIP-511 fallback for brokers that do not know the requested version), TLS, SASL PLAIN and
SCRAM-SHA-256/512 over SaslHandshake v1 + SaslAuthenticate, and a classification of every
failure into one short error name (`ProbeFailure.code`).

Every I/O step is bounded by the connection's deadline, so a broker that accepts the TCP
connection and never answers (a blackhole) costs at most the timeout. An answer is bounded too:
a frame over `max_frame` bytes fails the exchange (`RESPONSE_TOO_LARGE`) before its payload is
read, and one over `OFF_LOOP_BYTES` is decoded in a worker thread (one at a time per `decode_slot`,
the prober's per-target slot), never on the event loop. A name is looked up (`getaddrinfo`, which
blocks its thread and cannot be stopped) in a thread of `lookup_pool` while holding one of
`lookup_slot`'s places, until the thread returns, even after the deadline: the prober gives each
target `LOOKUPS_PER_TARGET` places and a pool with that many threads per target, so names that
never resolve hold their own target's threads, never another's. SCRAM takes only the iteration
counts a Kafka broker can hold (`SCRAM_MIN_ITERATIONS`..`SCRAM_MAX_ITERATIONS`); anything else,
and a server message that is not SCRAM (not UTF-8, a count that is not ASCII digits, a salt or
signature that is not base64), fails authentication (`AUTH_FAILED`, one line) before any key is
derived or any signature compared.
"""

from __future__ import annotations

import asyncio
import base64
import errno
import hashlib
import hmac
import ipaddress
import secrets
import socket
import ssl
from collections.abc import Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from streaming.collect.protocol.codec import DecodeError, decode_response, encode_request, spec
from streaming.plumbing.errors import FleetwatchError

__all__ = [
    "AUTH_FAILED",
    "CONNECTION_CLOSED",
    "CONNECTION_REFUSED",
    "DEFAULT_MAX_FRAME",
    "LOOKUPS_PER_TARGET",
    "OFF_LOOP_BYTES",
    "PROTOCOL_ERROR",
    "RESPONSE_TOO_LARGE",
    "SCRAM_MAX_ITERATIONS",
    "SCRAM_MIN_ITERATIONS",
    "TIMEOUT",
    "TLS_ERROR",
    "Connection",
    "KafkaErrorResponse",
    "ProbeFailure",
    "ScramClient",
    "Security",
    "error_name",
]

CONNECTION_REFUSED = "CONNECTION_REFUSED"
TIMEOUT = "TIMEOUT"
TLS_ERROR = "TLS_ERROR"
AUTH_FAILED = "AUTH_FAILED"
CONNECTION_CLOSED = "CONNECTION_CLOSED"  # accepted, then closed or reset before answering
UNKNOWN_HOST = "UNKNOWN_HOST"
HOST_UNREACHABLE = "HOST_UNREACHABLE"
NETWORK_ERROR = "NETWORK_ERROR"
PROTOCOL_ERROR = "PROTOCOL_ERROR"  # an answer that is not the Kafka protocol we expect
RESPONSE_TOO_LARGE = "RESPONSE_TOO_LARGE"  # an answer's frame over the probe's limit (`max_frame`)

API_VERSIONS = 18
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
FIRST_API_VERSIONS_VERSION = 3  # KIP-511 (Kafka 2.4+); older brokers answer with their range
CLIENT_SOFTWARE_NAME = "fleetwatch"
CLIENT_SOFTWARE_VERSION = "0.1.0"
# The largest answer read: the probe asks for no topics, so its biggest answers list every broker
# (Metadata, DescribeCluster) or every replica (DescribeQuorum). 1 MiB holds ~2,000 brokers with
# 255-character host and rack names, ~15,000 with 40-character ones (Kafka's biggest clusters
# have a few thousand). Configurable: `probe.max_response_bytes`.
DEFAULT_MAX_FRAME = 1024 * 1024
# Answers over this many bytes are decoded in a worker thread. Decoding costs ~30 us per broker
# entry (an entry can be 12 bytes), so 8 KiB takes at most ~20 ms of the event loop; a Metadata
# answer of a 100-broker cluster (~6 KB) stays on it.
OFF_LOOP_BYTES = 8 * 1024
# SCRAM iteration counts a Kafka broker can hold: Kafka's ScramMechanism (kafka-clients 4.4.0) has
# minIterations 4096, which its ScramSaslClient enforces, and maxIterations 16384, which the
# broker enforces on every credential it stores (AlterUserScramCredentials). A server asking for
# fewer gets a cheaply crackable proof; for more (2^31-1) it freezes whoever computes it.
SCRAM_MIN_ITERATIONS = 4096
SCRAM_MAX_ITERATIONS = 16384
# getaddrinfo blocks a thread until the resolver gives up (seconds per name when DNS does not
# answer), and a lookup abandoned at its deadline keeps it. The prober gives each target this many
# lookups in threads at a time (its `lookup_slot`) from a pool with as many threads per target
# (probe.slots.Slots), so one target's names that never resolve cannot take another target's lookups.
# 8 lookups at ~1 ms each (a caching resolver) resolve a target's 256 endpoints in ~30 ms; at
# 100 ms each, in ~3 s.
LOOKUPS_PER_TARGET = 8
# The lookups of a connection made without the prober's pool (the tools of streaming/workshop/kraft).
_RESOLVER = ThreadPoolExecutor(max_workers=64, thread_name_prefix="probe-dns")
# Big answers are decoded here (and SCRAM keys derived: hashlib releases the GIL). Each target
# decodes one big answer at a time (its `decode_slot`), so one target takes at most one worker.
_DECODER = ThreadPoolExecutor(max_workers=4, thread_name_prefix="probe-decode")

# Kafka error codes the probe reports by name (kafka-python does not know the newest ones).
_ERROR_NAMES = {
    -1: "UNKNOWN_SERVER_ERROR",
    7: "REQUEST_TIMED_OUT",
    8: "BROKER_NOT_AVAILABLE",
    31: "CLUSTER_AUTHORIZATION_FAILED",
    33: "UNSUPPORTED_SASL_MECHANISM",
    34: "ILLEGAL_SASL_STATE",
    35: "UNSUPPORTED_VERSION",
    41: "NOT_CONTROLLER",
    42: "INVALID_REQUEST",
    58: "SASL_AUTHENTICATION_FAILED",
    104: "INCONSISTENT_CLUSTER_ID",
    129: "REBOOTSTRAP_REQUIRED",
}


def error_name(code: int) -> str:
    """The Kafka name of an error code (`REBOOTSTRAP_REQUIRED` for 129)."""
    if code in _ERROR_NAMES:
        return _ERROR_NAMES[code]
    try:
        from kafka.errors import for_code

        name = for_code(code).message
    except Exception:  # any failure just means "no name known"
        name = "UNKNOWN"
    return name if name and name != "UNKNOWN" else f"KAFKA_ERROR_{code}"


class ProbeFailure(FleetwatchError):
    """A failed exchange: `code` goes into the event's `error` field."""

    def __init__(self, code: str, detail: str = "") -> None:
        super().__init__(f"{code}: {detail}" if detail else code)
        self.code = code
        self.detail = detail


class KafkaErrorResponse(ProbeFailure):
    """The broker answered with a Kafka error code."""

    def __init__(self, api: str, code: int, message: str | None = None) -> None:
        super().__init__(error_name(code), f"{api} answered error {code}" + (f" ({message})" if message else ""))
        self.api = api
        self.error_code = code


def classify(exc: BaseException, phase: str = "") -> ProbeFailure:
    """One transport failure as an error name. `phase` is "tls" during the TLS handshake."""
    if isinstance(exc, ProbeFailure):
        return exc
    if isinstance(exc, TimeoutError):
        return ProbeFailure(TIMEOUT, f"no answer in time ({phase or 'request'})")
    if isinstance(exc, ssl.SSLError | ssl.CertificateError):
        return ProbeFailure(TLS_ERROR, str(exc))
    if isinstance(exc, ConnectionRefusedError):
        return ProbeFailure(CONNECTION_REFUSED, str(exc))
    if isinstance(exc, socket.gaierror):
        return ProbeFailure(UNKNOWN_HOST, str(exc))
    if phase == "tls" and isinstance(exc, OSError | EOFError | asyncio.IncompleteReadError):
        return ProbeFailure(TLS_ERROR, f"handshake failed: {exc!r}")
    if isinstance(exc, asyncio.IncompleteReadError | ConnectionResetError | BrokenPipeError
                  | ConnectionAbortedError | EOFError):
        return ProbeFailure(CONNECTION_CLOSED, f"connection closed by the broker ({phase or 'request'})")
    if isinstance(exc, DecodeError):
        return ProbeFailure(PROTOCOL_ERROR, str(exc))
    if isinstance(exc, OSError):
        if exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN):
            return ProbeFailure(HOST_UNREACHABLE, str(exc))
        if exc.errno == errno.ETIMEDOUT:
            return ProbeFailure(TIMEOUT, str(exc))
        return ProbeFailure(NETWORK_ERROR, str(exc))
    return ProbeFailure(PROTOCOL_ERROR, repr(exc))


@dataclass(frozen=True)
class Security:
    """How to reach one cluster: TLS context and SASL credentials, already resolved. `repr` (and so
    str, f-strings, logging, and the repr of a `Target` holding it) leaves the password out."""

    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


class ScramClient:
    """The client side of SCRAM (RFC 5802) as Kafka uses it (no channel binding, no SASLprep)."""

    def __init__(self, mechanism: str, username: str, password: str, nonce: str | None = None) -> None:
        self.hash_name = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
        self.username = username.replace("=", "=3D").replace(",", "=2C")
        self.password = password.encode("utf-8")
        self.nonce = nonce or base64.b64encode(secrets.token_bytes(18)).decode()
        self._auth_message = ""
        self._server_signature = b""

    def _hmac(self, key: bytes, msg: bytes) -> bytes:
        return hmac.new(key, msg, self.hash_name).digest()

    @property
    def first_bare(self) -> str:
        return f"n={self.username},r={self.nonce}"

    def first_message(self) -> bytes:
        return ("n,," + self.first_bare).encode()

    def final_message(self, server_first: bytes) -> bytes:
        text, attrs = _scram_attributes(server_first, "server-first")
        nonce, salt, iterations = attrs.get("r", ""), attrs.get("s"), attrs.get("i")
        # RFC 5802's posit-number is ASCII digits: str.isdigit() takes "²" (which int() refuses) and
        # other scripts' digits (which int() reads).
        if (not nonce.startswith(self.nonce) or salt is None or iterations is None
                or not (iterations.isascii() and iterations.isdigit())):
            raise ProbeFailure(AUTH_FAILED, "invalid SCRAM server-first message: refused, no proof sent")
        count = int(iterations)
        if not SCRAM_MIN_ITERATIONS <= count <= SCRAM_MAX_ITERATIONS:
            # As Kafka's client refuses fewer than 4096; more than 16384 no Kafka broker can hold.
            raise ProbeFailure(AUTH_FAILED, f"SCRAM server asked for {count} iterations, outside Kafka's "
                                            f"{SCRAM_MIN_ITERATIONS}..{SCRAM_MAX_ITERATIONS}: refused, no proof sent")
        salted = hashlib.pbkdf2_hmac(self.hash_name, self.password, _scram_base64(salt, "salt"), count)
        client_key = self._hmac(salted, b"Client Key")
        stored_key = hashlib.new(self.hash_name, client_key).digest()
        without_proof = f"c=biws,r={nonce}"
        self._auth_message = f"{self.first_bare},{text},{without_proof}"
        signature = self._hmac(stored_key, self._auth_message.encode())
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = self._hmac(self._hmac(salted, b"Server Key"), self._auth_message.encode())
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify_final(self, server_final: bytes) -> None:
        _, attrs = _scram_attributes(server_final, "server-final")
        if _scram_base64(attrs.get("v", ""), "server signature") != self._server_signature:
            raise ProbeFailure(AUTH_FAILED, "SCRAM server signature does not match")


def _scram_attributes(message: bytes, which: str) -> tuple[str, dict[str, str]]:
    """A SCRAM server message as its text and its attributes; a message that is not UTF-8, or that
    carries a server error (`e=`), fails authentication."""
    try:
        text = message.decode()
    except UnicodeDecodeError:
        raise ProbeFailure(AUTH_FAILED, f"invalid SCRAM {which} message: not UTF-8") from None
    attrs = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
    if "e" in attrs:
        raise ProbeFailure(AUTH_FAILED, f"SCRAM server error: {attrs['e'][:200]!r}")
    return text, attrs


def _scram_base64(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:  # binascii.Error, and non-ASCII text
        raise ProbeFailure(AUTH_FAILED, f"invalid SCRAM {what}: not base64") from None


class Connection:
    """One connection to one broker address, bounded by a deadline on the event loop's clock."""

    def __init__(self, host: str, port: int, *, deadline: float, client_id: str = "fleetwatch-probe",
                 security: Security | None = None, max_frame: int = DEFAULT_MAX_FRAME,
                 decode_slot: asyncio.Semaphore | None = None, lookup_slot: asyncio.Semaphore | None = None,
                 lookup_pool: Executor | None = None) -> None:
        self.host, self.port = host, port
        self.deadline = deadline
        self.max_frame = max_frame
        self.decode_slot = decode_slot
        self.lookup_slot = lookup_slot
        self.lookup_pool = lookup_pool or _RESOLVER
        self.client_id = client_id
        self.security = security or Security()
        self.versions: dict[int, tuple[int, int]] = {}
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation = 0
        self.bytes_read = 0  # every answer's frame, size prefix included: what a reading cost

    def _remaining(self) -> float:
        remaining = self.deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            raise TimeoutError
        return remaining

    async def _bounded(self, awaitable: Any) -> Any:
        return await asyncio.wait_for(awaitable, self._remaining())

    async def _resolve(self) -> list[str]:
        try:
            ipaddress.ip_address(self.host)
            return [self.host]
        except ValueError:
            pass
        # socket.getaddrinfo is looked up at each call: what the process resolves with.
        infos = await self._in_thread(self.lookup_pool, self.lookup_slot, "name lookup",
                                      socket.getaddrinfo, self.host, self.port, 0, socket.SOCK_STREAM)
        return list(dict.fromkeys(info[4][0] for info in infos))

    async def open(self) -> None:
        try:
            addresses = await self._resolve()
            failure: BaseException | None = None
            for address in addresses:  # each resolved address in turn, within the one deadline
                try:
                    self._reader, self._writer = await self._bounded(asyncio.open_connection(address, self.port))
                    break
                except (ConnectionRefusedError, OSError) as exc:
                    if isinstance(exc, TimeoutError):
                        raise
                    failure = exc
            else:
                raise failure or ProbeFailure(UNKNOWN_HOST, f"{self.host} resolves to no address")
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise classify(exc, "connect") from exc
        assert self._writer is not None
        if self.security.tls:
            context = self.security.ssl_context or ssl.create_default_context()
            try:
                await self._bounded(self._writer.start_tls(context, server_hostname=self.host))
            except BaseException as exc:
                if isinstance(exc, asyncio.CancelledError):
                    raise
                raise classify(exc, "tls") from exc

    def close(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            # abort, not close: a graceful TLS close waits for a peer that may never answer.
            writer.transport.abort()

    async def __aenter__(self) -> Connection:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def supported(self, api_key: int, ours_min: int, ours_max: int) -> int | None:
        """The highest version both sides support, from the broker's ApiVersions answer."""
        theirs = self.versions.get(api_key)
        if theirs is None:
            return None
        low, high = max(theirs[0], ours_min), min(theirs[1], ours_max)
        return high if low <= high else None

    async def call(self, api: str, version: int, values: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Send `<api>Request` at `version` and return the decoded `<api>Response` body."""
        if self._writer is None or self._reader is None:
            raise ProbeFailure(CONNECTION_CLOSED, "not connected")
        self._correlation += 1
        correlation = self._correlation
        frame = encode_request(f"{api}Request", version, correlation, self.client_id, values)
        try:
            self._writer.write(frame)
            await self._bounded(self._writer.drain())
            size = int.from_bytes(await self._bounded(self._reader.readexactly(4)), "big", signed=True)
            if size > self.max_frame:
                raise ProbeFailure(RESPONSE_TOO_LARGE, f"{api} answer of {size} bytes is over the probe's limit "
                                                       f"of {self.max_frame} (probe.max_response_bytes)")
            if size < 4:
                raise ProbeFailure(PROTOCOL_ERROR, f"{api}: response frame of {size} bytes")
            self.bytes_read += 4 + size
            payload = await self._bounded(self._reader.readexactly(size))
            if size > OFF_LOOP_BYTES:
                got, body = await self._in_thread(_DECODER, self.decode_slot, "decoding",
                                                  decode_response, f"{api}Response", version, payload)
            else:
                got, body = decode_response(f"{api}Response", version, payload)
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise classify(exc, api) from exc
        if got != correlation:
            raise ProbeFailure(PROTOCOL_ERROR, f"{api}: correlation id {got}, expected {correlation}")
        return body

    async def _in_thread(self, pool: Executor, slot: asyncio.Semaphore | None, what: str,
                         func: Any, *args: Any) -> Any:
        """`func(*args)` in a thread of `pool`, within the deadline. `slot` (the target's decoding
        or lookup slot) is held until the work is done, even when the deadline passed first (a
        thread cannot be stopped): a target whose work outruns its timeout takes no more threads
        than its slot's places."""
        if slot is not None:
            try:
                await self._bounded(slot.acquire())
            except TimeoutError as exc:
                raise classify(exc, f"waiting for a thread: {what}") from exc
        try:
            future = asyncio.get_running_loop().run_in_executor(pool, func, *args)
        except BaseException:
            if slot is not None:
                slot.release()
            raise
        if slot is not None:
            future.add_done_callback(lambda _: slot.release())
        try:
            return await self._bounded(asyncio.shield(future))
        except TimeoutError as exc:
            raise classify(exc, what) from exc

    async def negotiate(self) -> dict[int, tuple[int, int]]:
        """ApiVersions: learn the broker's version table (KIP-511 fallback to an older version)."""
        version = FIRST_API_VERSIONS_VERSION
        for _ in range(2):
            body = await self.call("ApiVersions", version, self._software(version))
            table = {k["ApiKey"]: (k["MinVersion"], k["MaxVersion"]) for k in body["ApiKeys"] or ()}
            if body["ErrorCode"] == 35 and API_VERSIONS in table:  # UNSUPPORTED_VERSION: retry lower
                version = min(table[API_VERSIONS][1], spec("ApiVersionsRequest").valid.high)
                continue
            if body["ErrorCode"] != 0:
                raise KafkaErrorResponse("ApiVersions", body["ErrorCode"])
            self.versions = table
            return table
        raise KafkaErrorResponse("ApiVersions", 35)

    async def check_identity(self, cluster_id: str, node_id: int) -> None:
        """KIP-1242: ApiVersions v5 with the identity we expect; a misroute raises REBOOTSTRAP_REQUIRED."""
        values = {**self._software(5), "ClusterId": cluster_id, "NodeId": node_id}
        body = await self.call("ApiVersions", 5, values)
        if body["ErrorCode"] != 0:
            raise KafkaErrorResponse("ApiVersions", body["ErrorCode"])

    @staticmethod
    def _software(version: int) -> dict[str, Any]:
        if version < 3:
            return {}
        return {"ClientSoftwareName": CLIENT_SOFTWARE_NAME, "ClientSoftwareVersion": CLIENT_SOFTWARE_VERSION}

    async def authenticate(self) -> None:
        """SASL PLAIN or SCRAM over SaslHandshake v1 + SaslAuthenticate (after `negotiate`)."""
        sec = self.security
        mechanism = sec.sasl_mechanism or "PLAIN"
        if self.supported(SASL_HANDSHAKE, 1, 1) is None:
            raise ProbeFailure(AUTH_FAILED, "broker does not offer SaslHandshake v1")
        auth_version = self.supported(SASL_AUTHENTICATE, 0, 2)
        if auth_version is None:
            raise ProbeFailure(AUTH_FAILED, "broker does not offer SaslAuthenticate")
        body = await self.call("SaslHandshake", 1, {"Mechanism": mechanism})
        if body["ErrorCode"] != 0:
            offered = ", ".join(body["Mechanisms"] or ())
            raise ProbeFailure(AUTH_FAILED, f"SaslHandshake for {mechanism} answered {error_name(body['ErrorCode'])} "
                                            f"(broker offers: {offered or 'nothing'})")
        username, password = sec.username or "", sec.password or ""
        if mechanism == "PLAIN":
            await self._sasl_step(auth_version, b"\0" + username.encode() + b"\0" + password.encode())
            return
        scram = ScramClient(mechanism, username, password)
        server_first = await self._sasl_step(auth_version, scram.first_message())
        # Up to 16384 iterations of PBKDF2: milliseconds, in a worker (hashlib releases the GIL).
        server_final = await self._sasl_step(auth_version, await self._in_thread(
            _DECODER, self.decode_slot, "deriving the SCRAM key", scram.final_message, server_first))
        scram.verify_final(server_final)

    async def _sasl_step(self, version: int, token: bytes) -> bytes:
        body = await self.call("SaslAuthenticate", version, {"AuthBytes": token})
        if body["ErrorCode"] != 0:
            detail = body.get("ErrorMessage") or error_name(body["ErrorCode"])
            raise ProbeFailure(AUTH_FAILED, detail)
        return body["AuthBytes"] or b""
