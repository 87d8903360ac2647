"""A class archive for Kafka's JVMs, made once by `make jars` (`python -m streaming.workshop.kraft archive`).

Every Kafka process the tests, the benches and the demo start (a storage format, a node) loaded and
verified the same classes from the bundle's jars again: a 1-node cluster's format and start took
7.6 CPU-s, 5.5 with this archive (AppCDS: a JVM started with `-XX:ArchiveClassesAtExit` writes the
classes it loaded at exit; later JVMs map them with `-XX:SharedArchiveFile`). The archive is made
by one node of a 1-node cluster, stopped gracefully (a killed JVM writes nothing). Its name holds
the Java it was made with, so another Java never gets it; one that would refuse it anyway (another
classpath) starts as before, silently (`-Xshare:auto`). Nothing here is needed for correctness.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from streaming.plumbing.jars import cache_dir

__all__ = ["DEFAULT_BUNDLE", "archive_options", "archive_path", "dump_options"]

DEFAULT_BUNDLE = "kafka-4.4.0"  # the bundle nearly every Kafka process of the tests, benches and demo runs
# A JVM that cannot use the archive says so on stdout, which is the node's log: not worth a line.
_QUIET = ("-Xshare:auto", "-Xlog:cds=off", "-Xlog:cds+dynamic=off")


def archive_path(bundle: str) -> Path | None:
    java = shutil.which("java")
    if java is None:
        return None
    real = Path(java).resolve()
    key = hashlib.sha256(f"{real}|{real.stat().st_mtime_ns}".encode()).hexdigest()[:16]
    return cache_dir() / bundle / f"classes-{key}.jsa"


def archive_options(bundle: str) -> tuple[str, ...]:
    """JVM options that map the bundle's class archive, when one was made (else none)."""
    path = archive_path(bundle)
    return (f"-XX:SharedArchiveFile={path}", *_QUIET) if path is not None and path.is_file() else ()


def dump_options(target: Path) -> tuple[str, ...]:
    """JVM options that write the classes the JVM loaded to `target` when it exits normally."""
    return (f"-XX:ArchiveClassesAtExit={target}", *_QUIET)
