"""Why a bus could not be reached, in one line: the logged error that says most (the live refusal
of a wrong password is in test_bus_security.py, on a real SASL_SSL Kafka)."""

from __future__ import annotations

from kafka.errors import KafkaConnectionError, KafkaError, RequestTimedOutError, SaslAuthenticationFailedError

from streaming.bus.embedded import _BootstrapFailures

RAISED = KafkaError("Unable to bootstrap from [('127.0.0.1', 9093)]")


def _explained(*logged: BaseException) -> str:
    failures = _BootstrapFailures()
    failures.errors = list(logged)
    return failures.explain(RAISED)


def test_a_refused_login_is_named_even_after_a_timed_out_handshake_and_lost_connections():
    reason = _explained(RequestTimedOutError("Request timed out after 255 ms"),
                        KafkaConnectionError("socket disconnected"),
                        SaslAuthenticationFailedError("Authentication failed during authentication due to "
                                                      "invalid credentials with SASL mechanism SCRAM-SHA-512"))
    assert reason.split("; connection failed: ", 1)[1].startswith("SaslAuthenticationFailedError"), reason


def test_a_timed_out_request_says_more_than_a_lost_connection():
    reason = _explained(KafkaConnectionError("socket disconnected"), RequestTimedOutError("Request timed out"))
    assert "RequestTimedOutError" in reason and "\n" not in reason


def test_nothing_logged_is_the_raised_error_alone():
    assert _explained() == str(RAISED)
