"""The few Kafka protocol requests the probe speaks, built from Kafka's JSON message specs."""

from streaming.collect.protocol.client import (
    CLIENT_SOFTWARE_NAME,
    CLIENT_SOFTWARE_VERSION,
    LOOKUPS_PER_TARGET,
    Connection,
    KafkaErrorResponse,
    ProbeFailure,
    Security,
    error_name,
)
from streaming.collect.protocol.codec import (
    DecodeError,
    decode_body,
    decode_request,
    decode_response,
    encode_body,
    encode_request,
    encode_response,
    spec,
)

__all__ = [
    "CLIENT_SOFTWARE_NAME",
    "CLIENT_SOFTWARE_VERSION",
    "LOOKUPS_PER_TARGET",
    "Connection",
    "DecodeError",
    "KafkaErrorResponse",
    "ProbeFailure",
    "Security",
    "decode_body",
    "decode_request",
    "decode_response",
    "encode_body",
    "encode_request",
    "encode_response",
    "error_name",
    "spec",
]
