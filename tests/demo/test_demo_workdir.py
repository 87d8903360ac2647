"""`fleetwatch demo --workdir X` empties X at start: only a folder the demo made (issue 27.1).

`--workdir var` must not wipe the store and checkpoint `fleetwatch run` keeps there by default.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from streaming.config import ConfigError, FleetwatchConfig
from streaming.demo import WORKDIR_MARKER, DemoOptions, prepare_workdir, run_demo
from streaming.plumbing.errors import BusFailure, StoreFailure
from streaming.plumbing.ports import free_port

# Runs the real CLI, then says whether Spark's modules were loaded: a refusal must come before.
_CLI = ("import sys; from streaming.cli import main; code = main(sys.argv[1:]); "
        "print('pyspark loaded' if 'pyspark' in sys.modules else 'no pyspark', file=sys.stderr); sys.exit(code)")


def _demo(workdir, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _CLI, "demo", "--workdir", str(workdir), "--port", str(free_port()),
                           "--clusters", "1", "--brokers", "1"],
                          capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable})


@pytest.mark.integration
def test_the_demo_refuses_to_empty_a_folder_it_did_not_make(tmp_path):
    held = tmp_path / "mine"
    held.mkdir()
    (held / "notes.txt").write_text("keep me\n")
    result = _demo(held)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr[-2000:]
    assert lines[0] == (f"fleetwatch demo: --workdir {held}: refusing to empty a folder the demo did not make "
                        f"(it holds 'notes.txt' and no {WORKDIR_MARKER}): give a new or empty folder"), lines
    assert lines[1:] == ["no pyspark"], "one line, and no Spark started"
    assert (held / "notes.txt").read_text() == "keep me\n"
    assert sorted(p.name for p in held.iterdir()) == ["notes.txt"]


@pytest.mark.integration
def test_the_demo_refuses_the_folder_fleetwatch_run_keeps_its_store_in(tmp_path):
    # `fleetwatch run`'s defaults: var/fleetwatch.db and var/checkpoint (names the demo uses too).
    var = tmp_path / "var"
    (var / "checkpoint" / "offsets").mkdir(parents=True)
    (var / "fleetwatch.db").write_bytes(b"SQLite format 3\0")
    result = _demo(var)
    assert result.returncode == 2 and "refusing to empty a folder the demo did not make" in result.stderr
    assert (var / "fleetwatch.db").read_bytes() == b"SQLite format 3\0" and (var / "checkpoint" / "offsets").is_dir()
    with pytest.raises(ConfigError, match="refusing to empty"):
        prepare_workdir(var)


def test_a_file_is_no_work_folder(tmp_path):
    path = tmp_path / "demo"
    path.write_text("x")
    with pytest.raises(ConfigError, match="not a folder"):
        prepare_workdir(path)
    assert path.read_text() == "x"


def test_missing_empty_and_marked_folders_are_made_the_demos(tmp_path):
    for workdir in (tmp_path / "missing" / "demo", tmp_path / "empty", tmp_path / "marked"):
        if workdir.name != "demo":
            workdir.mkdir()
        if workdir.name == "marked":  # a folder of an earlier run of this version: anything in it goes
            (workdir / WORKDIR_MARKER).write_text("")
            (workdir / "spark-warehouse").mkdir()
            (workdir / "fleetwatch.db").write_text("old")
        prepare_workdir(workdir)
        assert [p.name for p in workdir.iterdir()] == [WORKDIR_MARKER]


def test_a_demo_folder_of_a_version_before_the_marker_is_still_emptied(tmp_path):
    # What `make demo` left in var/demo before the marker: the demo's own files only.
    old = tmp_path / "var" / "demo"
    (old / "checkpoint" / "state").mkdir(parents=True)
    (old / "real-kafka" / "node-1").mkdir(parents=True)
    for name in ("fleetwatch.log", "tansu.log", "fleetwatch.db", "fleetwatch.db-wal", "received.jsonl"):
        (old / name).write_text("old")
    prepare_workdir(old)
    assert [p.name for p in old.iterdir()] == [WORKDIR_MARKER]
    # Without its log, the same names could be `fleetwatch run`'s: refused (above). With a file the
    # demo never writes, refused too.
    (old / WORKDIR_MARKER).unlink()
    for name in ("fleetwatch.log", "fleetwatch.db", "notes.txt"):
        (old / name).write_text("x")
    with pytest.raises(ConfigError, match=r"it holds 'notes\.txt'"):
        prepare_workdir(old)


@pytest.mark.parametrize(("error", "code"), [(StoreFailure("the store refused the batch"), 3),
                                             (BusFailure("the bus could not be read"), 4),
                                             (RuntimeError("something else"), 1)])
def test_a_failed_demo_exits_with_the_code_of_its_kind(tmp_path, monkeypatch, capsys, error, code):
    """Issue 46.6: the demo exited 1 on every failure, against streaming/plumbing/errors.py's table of exit codes.
    (The job's coordinator stands in, failing: what is tested is how the demo ends.)"""

    class Failing:
        def __init__(self, *args, **kwargs) -> None:
            pass

        def run(self):
            raise error

    monkeypatch.setattr("streaming.job.JobCoordinator", Failing)
    options = DemoOptions(workdir=tmp_path / "demo", port=free_port(), clusters=1, brokers=1)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        assert run_demo(FleetwatchConfig(), options) == code
    finally:  # the demo takes the signals over: this test process's are given back
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
