"""How fleetwatch's own clients reach the bus: one record, made once from `bus:` in the config.

The job's readers (Spark's kafka source and the Python reader), the alert publisher, the probe's
publisher, the simulator and the topic set-up all connect through a `BusAccess`: the bootstrap
addresses and the security of `bus.security` (TLS, SASL PLAIN or SCRAM), with the credentials
read from the environment variables the config names, never from the config itself. Spark's
source takes them as `kafka.`-prefixed options (its JAAS line holds the password: Spark redacts
`kafka.sasl.jaas.config` in its logs and plans).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from streaming.config import ConfigError, SecurityConfig

__all__ = ["BusAccess"]

_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def _jaas_quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True)
class BusAccess:
    """The bus's addresses and how to authenticate to it, resolved.

    `client_settings`: keyword arguments of kafka-python's clients; `spark_options`: options of
    Spark's `kafka` source. `repr` leaves both out: they may hold a password.
    """

    bootstrap: str
    client_settings: Mapping[str, Any] = field(default_factory=dict, repr=False)
    spark_options: Mapping[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, bus: str | BusAccess) -> BusAccess:
        """A plain address is a PLAINTEXT bus (the embedded broker, tests)."""
        return bus if isinstance(bus, BusAccess) else cls(bus)

    @classmethod
    def from_config(cls, bootstrap: str, security: SecurityConfig, *, where: str = "bus.security",
                    environ: Mapping[str, str] | None = None) -> BusAccess:
        """Resolve `security`; a missing variable or unreadable TLS file is a one-line ConfigError."""
        environ = os.environ if environ is None else environ
        client: dict[str, Any] = {"security_protocol": security.protocol}
        spark = {"kafka.security.protocol": security.protocol}
        if security.protocol in ("SSL", "SASL_SSL"):
            for key, path in (("cafile", security.ssl_cafile), ("certfile", security.ssl_certfile),
                              ("keyfile", security.ssl_keyfile)):
                if path is not None and not os.access(path, os.R_OK):
                    raise ConfigError(f"{where}.ssl_{key}: cannot read {path}")
            if security.ssl_cafile:
                client["ssl_cafile"] = security.ssl_cafile
                spark |= {"kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": security.ssl_cafile}
            if security.ssl_certfile:
                client |= {"ssl_certfile": security.ssl_certfile, "ssl_keyfile": security.ssl_keyfile}
                # Kafka's PEM key store: certificate chain and private key in one file each, inline.
                spark |= {"kafka.ssl.keystore.type": "PEM",
                          "kafka.ssl.keystore.certificate.chain": _read(security.ssl_certfile),
                          "kafka.ssl.keystore.key": _read(security.ssl_keyfile or security.ssl_certfile)}
        if security.protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            mechanism = security.sasl_mechanism
            if mechanism is None:
                raise ConfigError(f"{where}.sasl_mechanism is required for {security.protocol}")
            missing = [f"{where}.{key}" + (f" (environment variable {name} is not set)" if name else " is not set")
                       for key, name in (("username_env", security.username_env),
                                         ("password_env", security.password_env))
                       if not name or name not in environ]
            if missing:
                raise ConfigError("; ".join(missing))
            username, password = environ[security.username_env or ""], environ[security.password_env or ""]
            client |= {"sasl_mechanism": mechanism, "sasl_plain_username": username, "sasl_plain_password": password}
            spark |= {"kafka.sasl.mechanism": mechanism,
                      "kafka.sasl.jaas.config": f"{_LOGIN_MODULES[mechanism]} required "
                                                f"username={_jaas_quoted(username)} password={_jaas_quoted(password)};"}
        return cls(bootstrap, client, spark)


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        return fh.read()
