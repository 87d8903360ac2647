"""The runbooks (issue 43; docs/runbooks/): one page per rule the engine can fire, each with the
sections an SRE looks for, and every Kafka command in them one that Kafka 4.4's bin/ ships, with
options its 4.4 class defines (tests/support/kafka_bin.py says where that list comes from)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from support.kafka_bin import KAFKA_4_4_BIN, KAFKA_4_4_OPTIONS
from support.paths import ROOT

from streaming.records.alert import RULES

RUNBOOKS = ROOT / "docs" / "runbooks"
SECTIONS = ("What it means", "Confirm with Kafka's tools", "Likely causes", "What to do", "When it resolves",
            "How it can fire falsely")
# A Kafka script as a runbook names it, with or without bin/.
_SCRIPT = re.compile(r"\b((?:kafka|connect|zookeeper|trogdor)[a-z0-9-]*\.sh)\b")


def _pages() -> list[Path]:
    return sorted(p for p in RUNBOOKS.glob("*.md") if p.name != "README.md")


def _commands(text: str) -> list[tuple[str, list[str]]]:
    """Every Kafka script a text names, with the options given to it on its line (up to a backtick)."""
    out = []
    for line in text.splitlines():
        for found in _SCRIPT.finditer(line):
            rest = line[found.end():].split("`")[0]
            options = [token.rstrip(".,;:)") for token in rest.split() if token.startswith("-")]
            out.append((found[1], options))
    return out


@pytest.mark.parametrize("rule", sorted(RULES))
def test_every_rule_the_engine_can_fire_has_a_runbook_with_every_section(rule):
    page = RUNBOOKS / f"{rule}.md"
    assert page.is_file(), f"{rule} has no runbook: write docs/runbooks/{rule}.md"
    text = page.read_text(encoding="utf-8")
    assert text.startswith(f"# {rule}\n")
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert [h for h in headings if h in SECTIONS] == list(SECTIONS), headings
    assert _commands(text), f"{rule}'s runbook names no Kafka tool to confirm it with"


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.stem)
def test_every_command_a_runbook_names_is_one_kafka_4_4_ships_with_its_options(page):
    for script, options in _commands(page.read_text(encoding="utf-8")):
        assert script in KAFKA_4_4_BIN, f"{page.name}: Kafka 4.4's bin/ has no {script}"
        known = KAFKA_4_4_OPTIONS.get(script)
        if options:
            assert known is not None, f"{page.name}: {script}'s options are not listed in support/kafka_bin.py"
            assert set(options) <= known, f"{page.name}: {script} has no option {sorted(set(options) - known)}"


def test_the_check_refuses_a_script_kafka_4_4_no_longer_ships_and_an_option_it_never_had():
    # ZooKeeper's scripts left with ZooKeeper (Kafka 4.0); --include-fenced is not the option's name.
    found = _commands("`bin/zookeeper-shell.sh localhost:2181` then "
                      "`bin/kafka-cluster.sh list-endpoints --bootstrap-server b:9092 --include-fenced`")
    assert found == [("zookeeper-shell.sh", []), ("kafka-cluster.sh", ["--bootstrap-server", "--include-fenced"])]
    assert "zookeeper-shell.sh" not in KAFKA_4_4_BIN
    assert "--include-fenced" not in KAFKA_4_4_OPTIONS["kafka-cluster.sh"]


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory):
    from dashboard import create_app

    return create_app(f"sqlite:///{tmp_path_factory.mktemp('runbooks') / 'fleet.db'}").server.test_client()


@pytest.mark.parametrize("rule", sorted(RULES))
def test_the_dashboard_serves_each_rules_runbook_as_a_page_for_a_phone(dashboard, rule):
    page = dashboard.get(f"/runbooks/{rule}")
    assert page.status_code == 200 and page.content_type == "text/html; charset=utf-8"
    text = page.get_data(as_text=True)
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in text
    assert f"<h1>{rule}</h1>" in text  # rendered, not the Markdown source
    assert all(f"<h2>{section}</h2>" in text for section in SECTIONS)
    assert "<pre><code" in text and "<script" not in text


def test_the_runbook_index_lists_every_page_and_an_unknown_rule_is_not_found(dashboard):
    index = dashboard.get("/runbooks").get_data(as_text=True)
    assert all(f'href="/runbooks/{page.stem}"' in index for page in _pages())
    assert dashboard.get("/runbooks/broker.nonexistent").status_code == 404


def test_a_runbook_is_behind_the_dashboards_auth(tmp_path, monkeypatch):
    from dashboard import create_app

    monkeypatch.setenv("FLEETWATCH_DASHBOARD_USER", "sre")
    monkeypatch.setenv("FLEETWATCH_DASHBOARD_PASSWORD", "s3cret-pass")
    client = create_app(f"sqlite:///{tmp_path / 'fleet.db'}").server.test_client()
    assert client.get("/runbooks/broker.fenced").status_code == 401
    page = client.get("/runbooks/broker.fenced", auth=("sre", "s3cret-pass"))
    assert page.status_code == 200 and "<h1>broker.fenced</h1>" in page.get_data(as_text=True)


@pytest.mark.integration
def test_the_wheel_ships_every_runbook(tmp_path):
    # What `pip install fleetwatch` (and the image, which installs the project so) gets. Built from a
    # copy of what the image copies (setuptools writes build/ beside the sources), links kept as links.
    source = tmp_path / "src"
    source.mkdir()
    for part in ("pyproject.toml", "README.md", "streaming", "dashboard", "docs"):
        if (ROOT / part).is_dir():
            shutil.copytree(ROOT / part, source / part, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.png"))
        else:
            shutil.copy2(ROOT / part, source / part)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(source)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = tmp_path.glob("fleetwatch-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        shipped = {name: archive.read(name) for name in archive.namelist() if name.startswith("dashboard/runbooks/")}
    assert {f"dashboard/runbooks/{rule}.md" for rule in RULES} <= set(shipped)
    assert shipped == {f"dashboard/runbooks/{p.name}": p.read_bytes() for p in RUNBOOKS.glob("*.md")}
