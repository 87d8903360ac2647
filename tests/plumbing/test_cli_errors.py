"""The `fleetwatch` command line turns an error into one line on stderr and the exit code of its
kind (streaming/plumbing/errors.py), run as a real process: a bad config, a store that is not a database."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from streaming.plumbing import errors

ROOT = Path(__file__).resolve().parents[1]


def _fleetwatch(*argv: str, module: str = "streaming.cli", cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", module, *argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def test_each_kind_of_error_has_an_exit_code_of_its_own():
    kinds = [getattr(errors, name) for name in errors.__all__ if isinstance(getattr(errors, name), type)]
    codes = {kind.__name__: kind.exit_code for kind in kinds}
    assert all(issubclass(kind, errors.FleetwatchError) for kind in kinds)
    assert sorted(codes.values()) == list(range(1, len(kinds) + 1)), codes


@pytest.mark.integration
def test_a_config_that_cannot_be_read_is_one_line_and_exit_2(tmp_path):
    done = _fleetwatch("run", "--config", "missing.yaml", cwd=tmp_path)
    assert (done.returncode, done.stderr) == (
        2, "fleetwatch run: missing.yaml: cannot read: No such file or directory\n")


@pytest.mark.integration
@pytest.mark.parametrize(("module", "argv"), [
    ("streaming.cli", ("silence", "list")),
    ("streaming.cli", ("notify", "--once")),
    ("streaming.notify", ("silence", "list")),  # the notifier's own entry point says it the same way
])
def test_a_store_that_is_not_a_database_is_one_line_and_exit_3(tmp_path, module, argv):
    (tmp_path / "store.db").write_bytes(b"not a database, " * 512)
    config = tmp_path / "fleetwatch.yaml"
    config.write_text(f"store: {{url: 'sqlite:///{tmp_path / 'store.db'}'}}\n"
                      "alerting: {receivers: [{name: hook, type: webhook, url: 'http://127.0.0.1:9/hook'}]}\n")
    done = _fleetwatch(*argv, "--config", str(config), module=module, cwd=tmp_path)
    command = argv[0]
    assert (done.returncode, done.stderr) == (3, f"fleetwatch {command}: the store failed: DatabaseError: "
                                                 "(sqlite3.DatabaseError) file is not a database\n")
