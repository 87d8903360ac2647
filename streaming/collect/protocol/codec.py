"""A codec driven by Kafka's JSON message specs (see `specs.py`).

It follows the rules of Kafka's message generator:
- a field exists in the versions of its `versions` range; a field outside it is not on the
  wire and decodes to its default;
- flexible versions (`flexibleVersions`) use compact strings, bytes and arrays (unsigned varint
  length + 1, 0 for null) and end every struct with a tagged-field section;
- tagged fields (`tag`, `taggedVersions`) are written only when they differ from their default,
  in tag order, each as (uvarint tag, uvarint size, value); unknown tags are skipped;
- request header v1 (non-flexible) or v2 (flexible: + tagged fields); the client id is always
  an old-style int16-length string. Response header v0, or v1 (+ tagged fields) for flexible
  versions, except ApiVersions, whose response header is always v0 (KIP-511).

Values are plain dicts keyed by the spec's field names (`{"ErrorCode": 0, "ApiKeys": [...]}`).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from streaming.collect.protocol.specs import SPECS
from streaming.plumbing.errors import FleetwatchError

__all__ = [
    "API_VERSIONS_KEY",
    "DecodeError",
    "MessageSpec",
    "decode_body",
    "decode_request",
    "decode_response",
    "encode_body",
    "encode_request",
    "encode_response",
    "spec",
]

API_VERSIONS_KEY = 18
UNSUPPORTED_VERSION = 35
_PRIMITIVES = {"bool", "int8", "int16", "uint16", "int32", "int64", "float64", "string", "bytes", "uuid"}
_FIXED = {"bool": ">?", "int8": ">b", "int16": ">h", "uint16": ">H", "int32": ">i", "int64": ">q",
          "float64": ">d"}


class DecodeError(FleetwatchError, ValueError):
    """Bytes that do not match the spec at the given version."""


@dataclass(frozen=True)
class Versions:
    low: int
    high: int  # inclusive; a large number for "N+"

    @staticmethod
    def parse(text: str | None) -> Versions | None:
        if text is None or text == "none":
            return None
        text = str(text).strip()
        if text.endswith("+"):
            return Versions(int(text[:-1]), 1 << 15)
        if "-" in text:
            low, high = text.split("-")
            return Versions(int(low), int(high))
        return Versions(int(text), int(text))

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.low <= version <= self.high


def _has(versions: Versions | None, version: int) -> bool:
    return versions is not None and version in versions


@dataclass(frozen=True)
class Field:
    name: str
    type: str  # element type for arrays
    array: bool
    versions: Versions | None
    nullable: Versions | None
    tag: int | None
    tagged: Versions | None
    default: Any
    fields: tuple[Field, ...]  # for struct types

    @property
    def struct(self) -> bool:
        return self.type not in _PRIMITIVES

    def present(self, version: int) -> bool:
        return _has(self.versions, version)

    def is_tagged(self, version: int) -> bool:
        return self.tag is not None and _has(self.tagged, version)

    def default_value(self) -> Any:
        if self.array:
            return None if self.default == "null" else []
        if self.struct:
            return None if self.default == "null" else {f.name: f.default_value() for f in self.fields}
        raw = self.default
        if raw == "null":
            return None
        if self.type == "bool":
            return raw in (True, "true")
        if self.type in ("string",):
            return "" if raw is None else str(raw)
        if self.type == "bytes":
            return b""
        if self.type == "uuid":
            return "AAAAAAAAAAAAAAAAAAAAAA"  # Uuid.ZERO_UUID in Kafka's base64 form
        if self.type == "float64":
            return float(raw or 0)
        return int(raw) if raw not in (None, "") else 0


@dataclass(frozen=True)
class MessageSpec:
    name: str
    api_key: int
    kind: str  # "request" or "response"
    valid: Versions
    flexible: Versions | None
    fields: tuple[Field, ...]

    def is_flexible(self, version: int) -> bool:
        return _has(self.flexible, version)

    def check_version(self, version: int) -> None:
        if version not in self.valid:
            raise ValueError(f"{self.name} has no version {version} (valid {self.valid.low}-{self.valid.high})")


def _build_field(raw: Mapping[str, Any], common: Mapping[str, list[Any]]) -> Field:
    kind = raw["type"]
    array = kind.startswith("[]")
    element = kind[2:] if array else kind
    nested = raw.get("fields")
    if nested is None and element not in _PRIMITIVES:
        nested = common.get(element)
        if nested is None:
            raise ValueError(f"struct type {element} of {raw['name']} has no fields")
    versions = raw.get("versions") or raw.get("taggedVersions")
    return Field(
        name=raw["name"], type=element, array=array,
        versions=Versions.parse(versions), nullable=Versions.parse(raw.get("nullableVersions")),
        tag=raw.get("tag"), tagged=Versions.parse(raw.get("taggedVersions")),
        default=raw.get("default"),
        fields=tuple(_build_field(f, common) for f in nested or ()),
    )


@cache
def spec(name: str) -> MessageSpec:
    """The parsed spec of one message, e.g. `spec("DescribeClusterResponse")`."""
    raw = SPECS[name]
    common = {s["name"]: s["fields"] for s in raw.get("commonStructs", ())}
    valid = Versions.parse(raw["validVersions"])
    assert valid is not None
    return MessageSpec(
        name=raw["name"], api_key=raw["apiKey"], kind=raw["type"], valid=valid,
        flexible=Versions.parse(raw.get("flexibleVersions")),
        fields=tuple(_build_field(f, common) for f in raw["fields"]),
    )


# ---------------------------------------------------------------- primitives


def _uvarint(value: int) -> bytes:
    if value < 0:
        raise ValueError("unsigned varint must be >= 0")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes | memoryview, pos: int = 0) -> None:
        self.data = memoryview(data)
        self.pos = pos

    def take(self, count: int) -> bytes:
        if count < 0 or self.pos + count > len(self.data):
            raise DecodeError(f"need {count} bytes at offset {self.pos}, have {len(self.data) - self.pos}")
        chunk = bytes(self.data[self.pos:self.pos + count])
        self.pos += count
        return chunk

    def fixed(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self.take(size))[0]

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            if shift > 63:
                raise DecodeError("varint too long")
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def remaining(self) -> int:
        return len(self.data) - self.pos


def _uuid_bytes(value: Any) -> bytes:
    if isinstance(value, uuid.UUID):
        return value.bytes
    if isinstance(value, bytes) and len(value) == 16:
        return value
    if isinstance(value, str):
        import base64

        return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    raise ValueError(f"not a uuid: {value!r}")


def _uuid_text(raw: bytes) -> str:
    import base64

    return base64.urlsafe_b64encode(raw).decode().rstrip("=")  # Kafka's Uuid.toString()


# ---------------------------------------------------------------- encode


def _write_length(out: bytearray, length: int | None, compact: bool, wide: bool) -> None:
    """A length prefix: compact uvarint(n+1), else int16 (strings) or int32 (arrays, bytes)."""
    if compact:
        out += _uvarint(0 if length is None else length + 1)
    elif wide:
        out += struct.pack(">i", -1 if length is None else length)
    else:
        out += struct.pack(">h", -1 if length is None else length)


def _write_value(out: bytearray, f: Field, element: bool, value: Any, version: int, flexible: bool) -> None:
    nullable = _has(f.nullable, version)
    if f.array and not element:
        if value is None:
            if not nullable:
                raise ValueError(f"{f.name} is not nullable in version {version}")
            _write_length(out, None, flexible, wide=True)
            return
        _write_length(out, len(value), flexible, wide=True)
        for item in value:
            _write_value(out, f, True, item, version, flexible)
        return
    if f.struct:
        if nullable and not element:
            # A nullable struct (DescribeTopicPartitions' Cursor): an int8 marker, -1 null, 1 present.
            out += struct.pack(">b", -1 if value is None else 1)
            if value is None:
                return
        _write_struct(out, f.fields, value or {}, version, flexible)
    elif f.type in _FIXED:
        out += struct.pack(_FIXED[f.type], value)
    elif f.type == "string":
        if value is None:
            if not nullable:
                raise ValueError(f"{f.name} is not nullable in version {version}")
            _write_length(out, None, flexible, wide=False)
            return
        raw = value.encode("utf-8")
        _write_length(out, len(raw), flexible, wide=False)
        out += raw
    elif f.type == "bytes":
        if value is None:
            if not nullable:
                raise ValueError(f"{f.name} is not nullable in version {version}")
            _write_length(out, None, flexible, wide=True)
            return
        _write_length(out, len(value), flexible, wide=True)
        out += value
    elif f.type == "uuid":
        out += _uuid_bytes(value)
    else:  # pragma: no cover - _PRIMITIVES is exhaustive
        raise ValueError(f"unknown type {f.type}")


def _write_struct(out: bytearray, fields: tuple[Field, ...], values: Mapping[str, Any], version: int,
                  flexible: bool) -> None:
    tagged: list[tuple[int, bytes]] = []
    for f in fields:
        if not f.present(version) and not f.is_tagged(version):
            continue
        value = values[f.name] if f.name in values else f.default_value()
        if flexible and f.is_tagged(version):
            if value == f.default_value():
                continue
            buf = bytearray()
            _write_value(buf, f, False, value, version, flexible)
            tagged.append((int(f.tag), bytes(buf)))  # type: ignore[arg-type]
            continue
        _write_value(out, f, False, value, version, flexible)
    if flexible:
        out += _uvarint(len(tagged))
        for tag, raw in sorted(tagged):
            out += _uvarint(tag) + _uvarint(len(raw)) + raw


def encode_body(message: MessageSpec | str, version: int, values: Mapping[str, Any] | None = None) -> bytes:
    """The body of one message (no header, no size prefix)."""
    msg = spec(message) if isinstance(message, str) else message
    msg.check_version(version)
    out = bytearray()
    _write_struct(out, msg.fields, values or {}, version, msg.is_flexible(version))
    return bytes(out)


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def request_header_version(msg: MessageSpec, version: int) -> int:
    return 2 if msg.is_flexible(version) else 1


def response_header_version(msg: MessageSpec, version: int) -> int:
    if msg.api_key == API_VERSIONS_KEY:
        return 0
    return 1 if msg.is_flexible(version) else 0


def encode_request(message: MessageSpec | str, version: int, correlation_id: int, client_id: str | None,
                   values: Mapping[str, Any] | None = None) -> bytes:
    """A complete request frame: size, request header v1/v2, body."""
    msg = spec(message) if isinstance(message, str) else message
    header = bytearray(struct.pack(">hhi", msg.api_key, version, correlation_id))
    _write_length(header, None if client_id is None else len(client_id.encode()), compact=False, wide=False)
    if client_id is not None:
        header += client_id.encode()
    if request_header_version(msg, version) == 2:
        header += _uvarint(0)
    return _frame(bytes(header) + encode_body(msg, version, values))


def encode_response(message: MessageSpec | str, version: int, correlation_id: int,
                    values: Mapping[str, Any] | None = None) -> bytes:
    """A complete response frame: size, response header v0/v1, body (for tests and fakes)."""
    msg = spec(message) if isinstance(message, str) else message
    header = struct.pack(">i", correlation_id)
    if response_header_version(msg, version) == 1:
        header += _uvarint(0)
    return _frame(header + encode_body(msg, version, values))


# ---------------------------------------------------------------- decode


def _read_length(reader: _Reader, compact: bool, wide: bool) -> int | None:
    if compact:
        n = reader.uvarint()
        return None if n == 0 else n - 1
    n = reader.fixed(">i" if wide else ">h")
    return None if n < 0 else n


def _read_value(reader: _Reader, f: Field, element: bool, version: int, flexible: bool) -> Any:
    if f.array and not element:
        count = _read_length(reader, flexible, wide=True)
        if count is None:
            return None
        if count > reader.remaining():
            raise DecodeError(f"{f.name}: array of {count} items in {reader.remaining()} bytes")
        return [_read_value(reader, f, True, version, flexible) for _ in range(count)]
    if f.struct:
        if _has(f.nullable, version) and not element and reader.fixed(">b") < 0:
            return None
        return _read_struct(reader, f.fields, version, flexible)
    if f.type in _FIXED:
        return reader.fixed(_FIXED[f.type])
    if f.type == "string":
        length = _read_length(reader, flexible, wide=False)
        if length is None:
            return None
        try:
            return reader.take(length).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DecodeError(f"{f.name}: not UTF-8") from exc
    if f.type == "bytes":
        length = _read_length(reader, flexible, wide=True)
        return None if length is None else reader.take(length)
    if f.type == "uuid":
        return _uuid_text(reader.take(16))
    raise DecodeError(f"unknown type {f.type}")  # pragma: no cover


def _read_struct(reader: _Reader, fields: tuple[Field, ...], version: int, flexible: bool) -> dict[str, Any]:
    values: dict[str, Any] = {}
    by_tag: dict[int, Field] = {}
    for f in fields:
        if flexible and f.is_tagged(version):
            by_tag[int(f.tag)] = f  # type: ignore[arg-type]
            values[f.name] = f.default_value()
        elif f.present(version):
            values[f.name] = _read_value(reader, f, False, version, flexible)
        else:
            values[f.name] = f.default_value()
    if flexible:
        for _ in range(reader.uvarint()):
            tag, size = reader.uvarint(), reader.uvarint()
            raw = reader.take(size)
            known = by_tag.get(tag)
            if known is not None:
                inner = _Reader(raw)
                values[known.name] = _read_value(inner, known, False, version, flexible)
    return values


def decode_body(message: MessageSpec | str, version: int, data: bytes | memoryview, *,
                exact: bool = True) -> dict[str, Any]:
    """Decode one body; with `exact`, trailing bytes are an error."""
    msg = spec(message) if isinstance(message, str) else message
    msg.check_version(version)
    reader = _Reader(data)
    try:
        values = _read_struct(reader, msg.fields, version, msg.is_flexible(version))
    except struct.error as exc:
        raise DecodeError(str(exc)) from exc
    if exact and reader.remaining():
        raise DecodeError(f"{msg.name} v{version}: {reader.remaining()} trailing bytes")
    return values


def decode_response(message: MessageSpec | str, version: int, payload: bytes | memoryview
                    ) -> tuple[int, dict[str, Any]]:
    """(correlation id, body) of one response payload (the frame without its size prefix).

    ApiVersions follows Kafka's client: a broker that does not support the requested version
    answers UNSUPPORTED_VERSION in a v0 body (listing its own ApiVersions range), so such an
    answer, or a body that does not parse at the requested version, is read as v0.
    """
    msg = spec(message) if isinstance(message, str) else message
    reader = _Reader(payload)
    try:
        correlation_id = reader.fixed(">i")
        if response_header_version(msg, version) == 1:
            for _ in range(reader.uvarint()):
                reader.uvarint()
                reader.take(reader.uvarint())
    except struct.error as exc:
        raise DecodeError(str(exc)) from exc
    body = reader.data[reader.pos:]
    if msg.api_key == API_VERSIONS_KEY and version > 0:
        if len(body) >= 2 and struct.unpack(">h", bytes(body[:2]))[0] == UNSUPPORTED_VERSION:
            return correlation_id, decode_body(msg, 0, body)
        try:
            return correlation_id, decode_body(msg, version, body)
        except DecodeError:
            return correlation_id, decode_body(msg, 0, body)
    return correlation_id, decode_body(msg, version, body)


def decode_request(payload: bytes | memoryview) -> tuple[MessageSpec, int, int, str | None, dict[str, Any]]:
    """(spec, version, correlation id, client id, body) of one request payload (for fakes)."""
    reader = _Reader(payload)
    api_key, version, correlation_id = reader.fixed(">h"), reader.fixed(">h"), reader.fixed(">i")
    length = _read_length(reader, compact=False, wide=False)
    client_id = None if length is None else reader.take(length).decode()
    msg = next((spec(name) for name, raw in SPECS.items()
                if raw["apiKey"] == api_key and raw["type"] == "request"), None)
    if msg is None:
        raise DecodeError(f"no request spec for api key {api_key}")
    if request_header_version(msg, version) == 2:
        for _ in range(reader.uvarint()):
            reader.uvarint()
            reader.take(reader.uvarint())
    return msg, version, correlation_id, client_id, decode_body(msg, version, reader.data[reader.pos:])
