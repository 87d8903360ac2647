"""A SASL_SSL listener for the brokers of a `KRaftCluster`: one SCRAM-SHA-512 user and a certificate
for 127.0.0.1 from a CA of its own, made with openssl."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SecureListener"]


@dataclass(frozen=True)
class SecureListener:
    """A SASL_SSL listener with one SCRAM-SHA-512 user and a certificate for 127.0.0.1 signed by
    a CA of its own (`ca.pem`, for clients), made with openssl in `directory`."""

    directory: Path
    username: str
    password: str = field(repr=False)  # never in a repr (logs, test reports)

    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.pem"

    @classmethod
    def create(cls, directory: str | Path, username: str, password: str) -> SecureListener:
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n", encoding="utf-8")
        for command in (
            ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=fleetwatch-test-ca",
             "-keyout", "ca.key", "-out", "ca.pem"],
            ["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", "broker.key",
             "-out", "broker.csr"],
            ["x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "2", "-extfile", "san.cnf", "-out", "broker.pem"],
            # Kafka's PEM key store wants a PKCS#8 key; unencrypted is fine without ssl.key.password.
            ["pkcs8", "-topk8", "-nocrypt", "-in", "broker.key", "-out", "broker-pkcs8.key"],
        ):
            subprocess.run(["openssl", *command], cwd=folder, check=True, capture_output=True)
        return cls(folder, username, password)

    def properties(self) -> dict[str, str]:
        key = (self.directory / "broker-pkcs8.key").read_text(encoding="utf-8")
        chain = (self.directory / "broker.pem").read_text(encoding="utf-8")
        return {
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config":
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            "ssl.keystore.type": "PEM",
            # One properties line each: `\n` is a line break inside a properties value.
            "ssl.keystore.key": key.strip().replace("\n", "\\n"),
            "ssl.keystore.certificate.chain": chain.strip().replace("\n", "\\n"),
        }

    def format_arguments(self) -> tuple[str, ...]:
        return ("--add-scram", f"SCRAM-SHA-512=[name={self.username},password={self.password}]")
