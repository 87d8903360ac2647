"""`python -m streaming.pipeline.precompile`: bytecode inside the pyspark.zip of a pip-installed pyspark.

Spark starts its Python processes with its `pyspark.zip` first on the path, and Python keeps no
bytecode for what it imports from a zip: each process compiles pyspark's sources again, 0.5 s of
CPU. `streaming.spark_daemon` takes the installed package instead for the UDF workers, but the
data source's planners and its streaming runner, and the state driver, are started by Spark
with its stock modules, one after another, at every start of the job (7 processes in a replay).

`make` runs this after installing: it adds, beside each module of the archive, the module's
bytecode as an unchecked-hash `.pyc`, which zipimport loads without comparing times. The sources
stay, so tracebacks are unchanged; an interpreter of another Python version ignores the `.pyc`
(another magic number) and compiles the source as before. A Spark installed elsewhere
(SPARK_HOME) is left alone: its pyspark.zip is that installation's.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import zipfile
from importlib._bootstrap_external import _code_to_hash_pyc  # type: ignore[attr-defined]
from pathlib import Path

__all__ = ["bundled_zip", "precompile"]


def bundled_zip() -> Path:
    """The pyspark.zip that the installed pyspark package ships (Spark's SPARK_HOME/python/lib)."""
    spec = importlib.util.find_spec("pyspark")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).parent / "python" / "lib" / "pyspark.zip"


def precompile(archive: Path) -> int:
    """Add the bytecode of every module of `archive` that has none; the number added (0: done before)."""
    with zipfile.ZipFile(archive) as source:
        names = set(source.namelist())
        missing = [n for n in names if n.endswith(".py") and n + "c" not in names]
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


def main() -> int:
    archive = bundled_zip()
    if not archive.is_file():
        print(f"no {archive}: pyspark is not pip-installed here; nothing to precompile")
        return 0
    added = precompile(archive)
    print(f"{archive}: bytecode added for {added} modules" if added else f"{archive}: already precompiled")
    return 0


if __name__ == "__main__":
    sys.exit(main())
