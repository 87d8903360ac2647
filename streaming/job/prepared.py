"""Where what `make` prepares for a fast Spark start lives (`streaming.job.startup` makes it).

- `bundled_zips`: the pyspark and py4j zips Spark puts first on its Python processes' path;
  `precompile` adds their modules' bytecode.
- `class_archive`: the JVM class archive made for this pyspark and this Java, which
  `spark_session` starts the driver's JVM with when it exists.

Apart from `startup` (which runs a replay to make the archive) so that the session, which reads
where the archive is, does not import the replay that starts a session.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import sys
import zipfile
from importlib._bootstrap_external import _code_to_hash_pyc  # type: ignore[attr-defined]
from pathlib import Path

import pyspark

__all__ = ["ARCHIVE_PREFIX", "bundled_zips", "class_archive", "precompile"]

ARCHIVE_PREFIX = "jvm-classes-"


def bundled_zips() -> list[Path]:
    """The zips the installed pyspark package ships for Spark's Python processes (pyspark's and
    py4j's, in SPARK_HOME/python/lib): Spark puts them first on those processes' path."""
    spec = importlib.util.find_spec("pyspark")
    assert spec is not None and spec.origin is not None
    return sorted((Path(spec.origin).parent / "python" / "lib").glob("*.zip"))


def precompile(archive: Path) -> int:
    """Add the bytecode of every module of `archive` that has none; the number added (0: done before)."""
    with zipfile.ZipFile(archive) as source:
        names = set(source.namelist())
        missing = {n for n in names if n.endswith(".py") and n + "c" not in names}
        if not missing:
            return 0
        partial = archive.with_name(archive.name + ".partial")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as target:
            for info in source.infolist():
                data = source.read(info)
                target.writestr(info, data)
                if info.filename in missing:
                    # The file name zipimport gives a module it compiles itself: tracebacks stay the same.
                    code = compile(data, f"{archive}/{info.filename}", "exec", dont_inherit=True)
                    bytecode = _code_to_hash_pyc(code, importlib.util.source_hash(data), checked=False)
                    target.writestr(zipfile.ZipInfo(info.filename + "c", info.date_time), bytes(bytecode),
                                    compress_type=zipfile.ZIP_DEFLATED)
    os.replace(partial, archive)
    return len(missing)


def _java() -> Path | None:
    """The java that spark-submit runs (JAVA_HOME's, else the one on PATH), links resolved."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def class_archive() -> Path | None:
    """Where the class archive for this pyspark and this Java lives, in this environment (None:
    no Java). Another pyspark (other jars) or another Java (its path or its file changed) names
    another archive, so a JVM is never given one it would refuse."""
    java = _java()
    if java is None:
        return None
    key = hashlib.sha256(f"{pyspark.__version__}|{java}|{java.stat().st_mtime_ns}".encode()).hexdigest()[:16]
    return Path(sys.prefix) / "fleetwatch" / f"{ARCHIVE_PREFIX}{key}.jsa"
